// llama2.c checkpoints -> strata tensors.
//
// Both layouts store float32 little-endian arrays, each tensor for all layers
// back to back ([n_layers][rows][cols]); matrices are [out, in] as in PyTorch.
//
//   legacy (version 0): 7 int32 config words (dim, hidden_dim, n_layers,
//     n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size means
//     the classifier is stored separately), then embedding, attention norms,
//     wq, wk, wv, wo, ffn norms, w1, w2, w3, final norm, two RoPE tables of
//     seq_len x head_dim/2 floats (unused: strata computes RoPE itself) and,
//     when not shared, the classifier.
//   version 1: a 256-byte header (uint32 magic 0x616b3432, int32 version 1,
//     the 7 config words with a positive vocab_size, a uint8 shared-classifier
//     flag, zero padding), then attention norms, ffn norms, final norm,
//     embedding, wq, wk, wv, wo, w1, w2, w3 and, when not shared, the
//     classifier.
#include "io/llama2c.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "model/params.h"

namespace strata {
namespace {

static_assert(std::endian::native == std::endian::little,
              "llama2.c files are little-endian; this reader maps them directly");

constexpr uint32_t kMagic = 0x616b3432;  // "ak42"
constexpr int64_t kLegacyHeaderBytes = 7 * 4;
constexpr int64_t kV1HeaderBytes = 256;

int32_t get_i32(const char* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Products of header values in int64, rejecting overflow (garbage headers).
struct Sizer {
  const std::string& where;
  int64_t mul(std::initializer_list<int64_t> xs) const {
    int64_t r = 1;
    for (int64_t x : xs)
      STRATA_CHECK(!__builtin_mul_overflow(r, x, &r), where,
                   ": implausible config (tensor sizes overflow)");
    return r;
  }
  int64_t add(int64_t a, int64_t b) const {
    int64_t r;
    STRATA_CHECK(!__builtin_add_overflow(a, b, &r), where,
                 ": implausible config (tensor sizes overflow)");
    return r;
  }
};

// Where one strata tensor lives in the file: rows x cols floats (cols 0: a
// vector of `rows`) from `offset` (in floats, from the start of the weights).
// For q and k, `heads` > 0: the rows of each head are reordered from
// interleaved pairs to rotate-half.
struct Source {
  int64_t offset = 0;
  int64_t rows = 0, cols = 0;
  int heads = 0;
};

// Row i of the strata matrix (within one head of D rows) comes from row
// source_row(i) of the llama2.c matrix: the first half of the strata rows are
// the even llama2.c rows, the second half the odd ones.
int64_t source_row(int64_t i, int64_t D) {
  const int64_t h = i / D, j = i % D;
  return h * D + (j < D / 2 ? 2 * j : 2 * (j - D / 2) + 1);
}

}  // namespace

Llama2cModel read_llama2c(const std::string& path) {
  const std::string where = "llama2.c model " + path;
  namespace fs = std::filesystem;
  std::error_code ec;
  STRATA_CHECK(fs::exists(path, ec), where, ": no such file");
  STRATA_CHECK(!fs::is_directory(path, ec), where, ": is a directory, not a file");
  const auto file_bytes = int64_t(fs::file_size(path, ec));
  STRATA_CHECK(!ec, where, ": cannot read its size: ", ec.message());
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in, where, ": cannot open for reading");

  // The header: enough bytes for the larger (v1) one, or the whole file.
  std::string head(size_t(std::min<int64_t>(file_bytes, kV1HeaderBytes)), '\0');
  in.read(head.data(), std::streamsize(head.size()));
  STRATA_CHECK(in, where, ": read error in the header");
  STRATA_CHECK(file_bytes >= kLegacyHeaderBytes, where, ": ", file_bytes,
               " bytes, too short for a llama2.c header");

  Llama2cModel m;
  int64_t header_bytes = kLegacyHeaderBytes;
  uint32_t magic;
  std::memcpy(&magic, head.data(), 4);
  const char* cfgp = head.data();
  if (magic == kMagic) {
    STRATA_CHECK(file_bytes >= kV1HeaderBytes, where, ": ", file_bytes,
                 " bytes, too short for the 256-byte llama2.c version-1 header");
    m.version = get_i32(head.data() + 4);
    STRATA_CHECK(m.version == 1, where, ": unsupported llama2.c version ", m.version,
                 m.version == 2 ? " (int8-quantized Q8_0)" : "", "; only the legacy layout and ",
                 "version 1 (float32) are supported");
    cfgp = head.data() + 8;
    const auto flag = uint8_t(head[36]);
    STRATA_CHECK(flag <= 1, where, ": shared-classifier flag is ", int(flag), ", expected 0 or 1");
    m.shared_classifier = flag == 1;
    for (int64_t i = 37; i < kV1HeaderBytes; ++i)
      STRATA_CHECK(head[size_t(i)] == 0, where, ": header byte ", i,
                   " is not zero (corrupt version-1 header?)");
    header_bytes = kV1HeaderBytes;
  }

  // The 7 config words.
  const int64_t dim = get_i32(cfgp), hidden = get_i32(cfgp + 4), layers = get_i32(cfgp + 8),
                heads = get_i32(cfgp + 12), kv_heads = get_i32(cfgp + 16),
                seq_len = get_i32(cfgp + 24);
  int64_t vocab = get_i32(cfgp + 20);
  if (m.version == 0) {
    m.shared_classifier = vocab > 0;
    vocab = vocab < 0 ? -vocab : vocab;
  } else {
    STRATA_CHECK(vocab > 0, where, ": vocab_size ", vocab, " must be positive in version 1");
  }
  const std::string layout_name = m.version == 0 ? "legacy" : "version-1";
  const std::string hint = " (not a " + layout_name + " llama2.c file?)";
  auto positive = [&](int64_t v, const char* key) {
    STRATA_CHECK(v > 0, where, ": ", key, " is ", v, hint);
  };
  positive(dim, "dim");
  positive(hidden, "hidden_dim");
  positive(layers, "n_layers");
  positive(heads, "n_heads");
  positive(kv_heads, "n_kv_heads");
  positive(vocab, "vocab_size");
  positive(seq_len, "seq_len");
  STRATA_CHECK(dim % heads == 0 && (dim / heads) % 2 == 0, where, ": dim ", dim, " is not n_heads ",
               heads, " x an even head size", hint);
  STRATA_CHECK(heads % kv_heads == 0, where, ": n_heads ", heads,
               " is not a multiple of n_kv_heads ", kv_heads, hint);
  const int64_t D = dim / heads, kv_dim = kv_heads * D;

  // The arrays in file order, described twice: first only their sizes (with
  // overflow checks, before anything is allocated for a garbage header), then,
  // once the file size checks out, where each strata tensor lives.
  const Sizer s{where};
  const int64_t n_rope = s.mul({seq_len, D / 2});
  int64_t floats = 0;
  bool record = false;
  std::unordered_map<std::string, Source> src;
  // A per-layer array: `rows` x `cols` per layer (cols 0: a vector).
  auto add_layers = [&](const std::string& suffix, int64_t rows, int64_t cols, int permute) {
    const int64_t n = rows * (cols ? cols : 1);
    if (record)
      for (int64_t l = 0; l < layers; ++l)
        src["model.layers." + std::to_string(l) + "." + suffix] =
            Source{floats + l * n, rows, cols, permute};
    floats = s.add(floats, s.mul({layers, rows, cols ? cols : 1}));
  };
  auto add_one = [&](const std::string& name, int64_t rows, int64_t cols) {
    if (record) src[name] = Source{floats, rows, cols, 0};
    floats = s.add(floats, s.mul({rows, cols ? cols : 1}));
  };
  auto add_attention = [&] {
    add_layers("self_attn.q_proj.weight", dim, dim, int(heads));
    add_layers("self_attn.k_proj.weight", kv_dim, dim, int(kv_heads));
    add_layers("self_attn.v_proj.weight", kv_dim, dim, 0);
    add_layers("self_attn.o_proj.weight", dim, dim, 0);
  };
  auto add_mlp = [&] {
    add_layers("mlp.gate_proj.weight", hidden, dim, 0);  // w1
    add_layers("mlp.down_proj.weight", dim, hidden, 0);  // w2
    add_layers("mlp.up_proj.weight", hidden, dim, 0);    // w3
  };
  auto describe = [&] {
    floats = 0;
    if (m.version == 0) {
      add_one("model.embed_tokens.weight", vocab, dim);
      add_layers("input_layernorm.weight", dim, 0, 0);
      add_attention();
      add_layers("post_attention_layernorm.weight", dim, 0, 0);
      add_mlp();
      add_one("model.norm.weight", dim, 0);
      floats = s.add(floats, s.mul({2, n_rope}));  // freq_cis real and imaginary parts: skipped
    } else {
      add_layers("input_layernorm.weight", dim, 0, 0);
      add_layers("post_attention_layernorm.weight", dim, 0, 0);
      add_one("model.norm.weight", dim, 0);
      add_one("model.embed_tokens.weight", vocab, dim);
      add_attention();
      add_mlp();
    }
    if (!m.shared_classifier) add_one("lm_head.weight", vocab, dim);
  };
  describe();
  const int64_t expected = s.add(header_bytes, s.mul({floats, 4}));
  STRATA_CHECK(file_bytes == expected, where, ": ", file_bytes, " bytes, expected ", expected,
               " for a ", layout_name, " file with dim ", dim, ", hidden_dim ", hidden,
               ", n_layers ", layers, ", n_heads ", heads, ", n_kv_heads ", kv_heads,
               ", vocab_size ", vocab, ", seq_len ", seq_len, " and a ",
               m.shared_classifier ? "shared" : "separate", " classifier",
               file_bytes < expected ? " (truncated?)" : "");
  record = true;
  describe();

  LlamaConfig& c = m.config;
  c.vocab_size = int(vocab);
  c.hidden_size = int(dim);
  c.intermediate_size = int(hidden);
  c.num_hidden_layers = int(layers);
  c.num_attention_heads = int(heads);
  c.num_key_value_heads = int(kv_heads);
  c.head_dim = 0;
  c.max_position_embeddings = int(seq_len);
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = m.shared_classifier;
  c.attention_bias = false;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  c.finalize(where);

  // The tensors, in ParamLayout order.
  const ParamLayout layout(c);
  std::vector<float> buf;
  for (const ParamInfo& info : layout.tensors()) {
    auto it = src.find(info.name);
    STRATA_CHECK(it != src.end(), where, ": no llama2.c array for tensor ", info.name);
    const Source& so = it->second;
    std::vector<float> t(size_t(info.numel));
    STRATA_CHECK(int64_t(t.size()) == so.rows * (so.cols ? so.cols : 1), where,
                 ": size mismatch for ", info.name);
    in.seekg(std::streamoff(header_bytes + so.offset * 4));
    if (so.heads == 0) {
      in.read(reinterpret_cast<char*>(t.data()), std::streamsize(t.size() * 4));
    } else {
      buf.resize(t.size());
      in.read(reinterpret_cast<char*>(buf.data()), std::streamsize(buf.size() * 4));
      const int64_t head_rows = so.rows / so.heads;
      for (int64_t r = 0; r < so.rows; ++r)
        std::memcpy(t.data() + r * so.cols, buf.data() + source_row(r, head_rows) * so.cols,
                    size_t(so.cols) * 4);
    }
    STRATA_CHECK(in, where, ": read error in ", info.name);
    m.tensors.emplace_back(info.name, std::move(t));
  }
  return m;
}

}  // namespace strata
