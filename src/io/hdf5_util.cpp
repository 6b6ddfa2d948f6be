// HDF5 plumbing of strata checkpoints (hdf5_util.h).
#include "io/hdf5_util.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/text.h"

namespace strata::hdf5 {
namespace {

herr_t innermost_error(unsigned n, const H5E_error2_t* e, void* out) {
  if (n == 0 && e && e->desc) *static_cast<std::string*>(out) = e->desc;
  return 0;
}

// The innermost message on HDF5's error stack (where the error was detected),
// flattened to one line; clears the stack.
std::string hdf5_detail() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &s);
  H5Eclear2(H5E_DEFAULT);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

#if !H5_VERSION_GE(1, 10, 7)
// Older libraries only read the environment variable (before the first open).
[[maybe_unused]] const bool kNoLockingEnv = [] {
  setenv("HDF5_USE_FILE_LOCKING", "FALSE", 0);
  return true;
}();
#endif

// The names of the links in a group, in HDF5's native order. Walking the
// group's index (H5Literate in native order) does not build HDF5's sorted link
// table, which H5Lget_name_by_idx builds on every call (quadratic in the
// number of tensors) and which HDF5 1.10 frees uninitialised when a link of a
// corrupt file fails to decode (a crash found by fuzz/fuzz_checkpoint.cpp).
#if H5_VERSION_GE(1, 12, 0)
using LinkInfo = H5L_info2_t;
#else
using LinkInfo = H5L_info_t;
#endif

herr_t add_link_name(hid_t, const char* name, const LinkInfo*, void* names) {
  static_cast<std::vector<std::string>*>(names)->emplace_back(name);
  return 0;
}

}  // namespace

void hdf5_init() {
  thread_local bool done = false;
  if (done) return;
  // No library teardown at exit: after a failed write (a full disk) HDF5 can
  // keep the failed file's id, and closing it again from its atexit handler
  // crashes the process after the error was reported. Every file is closed
  // explicitly on the way out; the kernel reclaims the rest. This must come
  // before the library is initialised, so once per process, first.
  static const bool no_atexit = [] {
    H5dont_atexit();
    return true;
  }();
  (void)no_atexit;
  H5open();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  done = true;
}

[[noreturn]] void fail_h5(const std::string& file, const std::string& what) {
  const std::string detail = hdf5_detail();
  // `what` may name an object of the file (a tensor), whose name may hold anything.
  fail(one_line(
      cat("checkpoint ", file, ": ", what, detail.empty() ? "" : " (HDF5: " + detail + ")")));
}

H5Handle wrap(hid_t id, H5Handle::Closer close, const std::string& file, const std::string& what) {
  if (id < 0) fail_h5(file, what);
  return H5Handle(id, close);
}

H5Handle file_access(const std::string& file) {
  H5Handle fapl = wrap(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, file, "cannot create property list");
  if (H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0)
    fail_h5(file, "cannot set library version bounds");
#if H5_VERSION_GE(1, 10, 7)
  if (H5Pset_file_locking(fapl.get(), false, true) < 0)
    fail_h5(file, "cannot disable file locking");
#endif
  return fapl;
}

bool link_exists(hid_t loc, const std::string& name) {
  const htri_t r = H5Lexists(loc, name.c_str(), H5P_DEFAULT);
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

std::vector<std::string> link_names(hid_t group, const std::string& file, const std::string& what) {
  std::vector<std::string> names;
  hsize_t next = 0;
#if H5_VERSION_GE(1, 12, 0)
  const herr_t r = H5Literate2(group, H5_INDEX_NAME, H5_ITER_NATIVE, &next, add_link_name, &names);
#else
  const herr_t r = H5Literate(group, H5_INDEX_NAME, H5_ITER_NATIVE, &next, add_link_name, &names);
#endif
  if (r < 0) fail_h5(file, "cannot list " + what);
  return names;
}

bool path_exists(hid_t loc, const std::string& path) {
  if (path.empty()) return false;
  for (size_t pos = path.find('/'); pos != std::string::npos; pos = path.find('/', pos + 1))
    if (!link_exists(loc, path.substr(0, pos))) return false;
  return link_exists(loc, path);
}

void write_text_attr(hid_t loc, const char* name, const std::string& text,
                     const std::string& file) {
  STRATA_CHECK(std::memchr(text.data(), 0, text.size()) == nullptr, "checkpoint ", file,
               ": attribute '", name, "' contains a NUL byte");
  H5Handle type = wrap(H5Tcopy(H5T_C_S1), H5Tclose, file, "cannot create string type");
  if (H5Tset_size(type.get(), H5T_VARIABLE) < 0 || H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0)
    fail_h5(file, "cannot create string type");
  H5Handle space = wrap(H5Screate(H5S_SCALAR), H5Sclose, file, "cannot create dataspace");
  H5Handle attr = wrap(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                       H5Aclose, file, cat("cannot create attribute '", name, "'"));
  const char* p = text.c_str();
  if (H5Awrite(attr.get(), type.get(), &p) < 0)
    fail_h5(file, cat("cannot write attribute '", name, "'"));
}

void write_int_attr(hid_t loc, const char* name, int64_t v, const std::string& file) {
  H5Handle space = wrap(H5Screate(H5S_SCALAR), H5Sclose, file, "cannot create dataspace");
  H5Handle attr = wrap(H5Acreate2(loc, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                       H5Aclose, file, cat("cannot create attribute '", name, "'"));
  if (H5Awrite(attr.get(), H5T_NATIVE_INT64, &v) < 0)
    fail_h5(file, cat("cannot write attribute '", name, "'"));
}

bool has_attr(hid_t loc, const char* name) {
  const htri_t r = H5Aexists(loc, name);
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

// Reads a scalar string attribute, variable- or fixed-length. `where` names
// the object for messages ("/" or "/tokenizer").
std::string read_text_attr(hid_t loc, const char* name, const std::string& file,
                           const std::string& where) {
  const std::string what = cat("attribute '", name, "' of ", where);
  STRATA_CHECK(has_attr(loc, name), "checkpoint ", file, ": missing ", what);
  H5Handle attr = wrap(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, file, "cannot open " + what);
  H5Handle ftype = wrap(H5Aget_type(attr.get()), H5Tclose, file, "cannot read the type of " + what);
  STRATA_CHECK(H5Tget_class(ftype.get()) == H5T_STRING, "checkpoint ", file, ": ", what,
               " is not a string");
  H5Handle space = wrap(H5Aget_space(attr.get()), H5Sclose, file, "cannot read " + what);
  STRATA_CHECK(H5Sget_simple_extent_npoints(space.get()) == 1, "checkpoint ", file, ": ", what,
               " is not a single string");
  H5Handle mtype = wrap(H5Tcopy(H5T_C_S1), H5Tclose, file, "cannot create string type");
  // HDF5 converts no character sets: read with the stored one (ASCII or UTF-8).
  const H5T_cset_t cset = H5Tget_cset(ftype.get());
  if (cset < 0 || H5Tset_cset(mtype.get(), cset) < 0)
    fail_h5(file, "cannot read the type of " + what);
  const htri_t is_var = H5Tis_variable_str(ftype.get());
  if (is_var < 0) fail_h5(file, "cannot read the type of " + what);
  if (is_var) {
    if (H5Tset_size(mtype.get(), H5T_VARIABLE) < 0) fail_h5(file, "cannot create string type");
    char* p = nullptr;
    if (H5Aread(attr.get(), mtype.get(), &p) < 0) fail_h5(file, "cannot read " + what);
    std::string out = p ? p : "";
    if (p) H5free_memory(p);
    return out;
  }
  const size_t n = H5Tget_size(ftype.get());
  if (n == 0) fail_h5(file, "cannot read the type of " + what);
  if (H5Tset_size(mtype.get(), n) < 0) fail_h5(file, "cannot create string type");
  std::string buf(n, '\0');
  if (H5Aread(attr.get(), mtype.get(), buf.data()) < 0) fail_h5(file, "cannot read " + what);
  buf.resize(std::strlen(buf.c_str()));  // null- or space-padded
  return buf;
}

int64_t read_int_attr(hid_t loc, const char* name, const std::string& file,
                      const std::string& where) {
  const std::string what = cat("attribute '", name, "' of ", where);
  STRATA_CHECK(has_attr(loc, name), "checkpoint ", file, ": missing ", what);
  H5Handle attr = wrap(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, file, "cannot open " + what);
  H5Handle ftype = wrap(H5Aget_type(attr.get()), H5Tclose, file, "cannot read the type of " + what);
  STRATA_CHECK(H5Tget_class(ftype.get()) == H5T_INTEGER, "checkpoint ", file, ": ", what,
               " is not an integer");
  H5Handle space = wrap(H5Aget_space(attr.get()), H5Sclose, file, "cannot read " + what);
  STRATA_CHECK(H5Sget_simple_extent_npoints(space.get()) == 1, "checkpoint ", file, ": ", what,
               " is not a single integer");
  int64_t v = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, &v) < 0) fail_h5(file, "cannot read " + what);
  return v;
}

nlohmann::json parse_json_attr(hid_t loc, const char* name, const std::string& file) {
  const std::string text = read_text_attr(loc, name, file, "/");
  // Nesting is bounded while parsing: nlohmann::json parses any depth, but
  // copies and prints values recursively (inspect, a resume), and a value
  // nested 100,000 deep overflows the stack there.
  constexpr int kMaxDepth = 64;
  const nlohmann::json::parser_callback_t bounded = [&](int depth, nlohmann::json::parse_event_t,
                                                        nlohmann::json&) {
    STRATA_CHECK(depth <= kMaxDepth, "checkpoint ", file, ": attribute '", name,
                 "' nests JSON deeper than ", kMaxDepth, " levels");
    return true;
  };
  try {
    return nlohmann::json::parse(text, bounded);
  } catch (const nlohmann::json::exception& e) {
    fail(cat("checkpoint ", file, ": attribute '", name, "' is not valid JSON: ", e.what()));
  }
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<int64_t> dataset_shape(hid_t dset, const std::string& file, const std::string& what) {
  H5Handle space = wrap(H5Dget_space(dset), H5Sclose, file, "cannot read the shape of " + what);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail_h5(file, "cannot read the shape of " + what);
  std::vector<hsize_t> dims(rank);
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
    fail_h5(file, "cannot read the shape of " + what);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

H5Handle bf16_type(const std::string& file) {
  H5Handle t = wrap(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, file, "cannot create the bfloat16 type");
  if (H5Tset_fields(t.get(), 15, 7, 8, 0, 7) < 0 || H5Tset_offset(t.get(), 0) < 0 ||
      H5Tset_precision(t.get(), 16) < 0 || H5Tset_size(t.get(), 2) < 0 ||
      H5Tset_ebias(t.get(), 127) < 0)
    fail_h5(file, "cannot define the bfloat16 type");
  return t;
}

bool is_bf16_type(hid_t t) {
  size_t spos, epos, esize, mpos, msize;
  return H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == 2 &&
         H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) >= 0 && spos == 15 && epos == 7 &&
         esize == 8 && mpos == 0 && msize == 7 && H5Tget_ebias(t) == 127;
}

}  // namespace strata::hdf5
