// Reading task data through the format adapters (task_formats.h).
#include "eval/task_formats.h"

#include <cctype>
#include <charconv>
#include <filesystem>
#include <string_view>

#include "core/error.h"
#include "core/file.h"
#include "core/text.h"

namespace strata::task_internal {
namespace {

namespace fs = std::filesystem;

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.replace: every non-overlapping occurrence, left to right.
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  if (pos == 0) return;
  out.append(s, pos);
  s = std::move(out);
}

}  // namespace

std::vector<Row> read_jsonl(const std::string& path) {
  const std::string text = read_file(path, "data file");
  std::vector<Row> rows;
  size_t line = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line;
    const std::string_view s(text.data() + pos, end - pos);
    pos = end + 1;
    if (trim(s).empty()) continue;
    Row r;
    r.where = cat(path, ":", line);
    // Nesting is bounded while parsing: fields are copied recursively when
    // they are looked up, and a value nested 100,000 deep overflowed the stack.
    const json::parser_callback_t bounded = [&](int depth, json::parse_event_t, json&) {
      if (depth > 64) fail_one_line(r.where, ": JSON nested deeper than 64 levels");
      return true;
    };
    try {
      r.fields = json::parse(s, bounded);
    } catch (const json::parse_error& e) {
      fail_one_line(r.where, ": malformed JSON: ", e.what());
    }
    if (!r.fields.is_object())
      fail_one_line(r.where, ": expected a JSON object, got ", r.fields.type_name());
    rows.push_back(std::move(r));
  }
  return rows;
}

// RFC 4180 CSV: fields separated by commas, records by LF or CRLF; a quoted
// field may hold commas, line breaks and doubled quotes (""). The first record
// is the header naming the fields; blank lines are skipped. `delimiter`
// replaces the comma (a tab for TSV); without `quoting` quotes are plain
// characters (Python's csv.QUOTE_NONE).
std::vector<Row> read_csv(const std::string& path, char delimiter, bool quoting) {
  const std::string text = read_file(path, "data file");
  std::vector<std::vector<std::string>> records;
  std::vector<size_t> lines;  // first line of each record
  std::vector<std::string> rec;
  std::string field;
  bool in_quotes = false, quoted = false;  // inside quotes; the field was quoted
  size_t line = 1, rec_line = 1, quote_line = 1;
  auto end_field = [&] {
    rec.push_back(std::move(field));
    field.clear();
    quoted = false;
  };
  auto end_record = [&] {
    end_field();
    if (!(rec.size() == 1 && rec[0].empty())) {
      records.push_back(std::move(rec));
      lines.push_back(rec_line);
    }
    rec.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_quotes && quoting) {
      if (ch == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (ch == '"') {
        in_quotes = false;
      } else {
        line += ch == '\n';
        field += ch;
      }
      continue;
    }
    if (ch == delimiter) {
      end_field();
    } else if (ch == '\n' || (ch == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      i += ch == '\r';
      end_record();
      rec_line = ++line;
    } else if (quoted) {
      fail_one_line(path, ":", line, ": unexpected text after a closing quote");
    } else if (ch == '"' && quoting) {
      if (!field.empty()) fail_one_line(path, ":", line, ": quote inside an unquoted field");
      in_quotes = quoted = true;
      quote_line = line;
    } else {
      field += ch;
    }
  }
  if (in_quotes) fail_one_line(path, ":", quote_line, ": unterminated quoted field");
  if (!field.empty() || quoted || !rec.empty()) end_record();

  if (records.empty()) fail_one_line(path, ": empty CSV file (expected a header)");
  const std::vector<std::string>& header = records[0];
  std::vector<Row> rows;
  for (size_t r = 1; r < records.size(); ++r) {
    Row row;
    row.where = cat(path, ":", lines[r]);
    if (records[r].size() != header.size())
      fail_one_line(row.where, ": ", records[r].size(), " fields, the header has ", header.size());
    row.fields = json::object();
    for (size_t f = 0; f < header.size(); ++f) row.fields[header[f]] = std::move(records[r][f]);
    rows.push_back(std::move(row));
  }
  return rows;
}

namespace {

// PIQA's labels file: one 0/1 per line, the i-th for the i-th JSONL row.
void attach_labels(std::vector<Row>& rows, const std::string& labels_path) {
  const std::string text = read_file(labels_path, "labels file");
  size_t n = 0, line = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line;
    const std::string s = trim(std::string_view(text).substr(pos, end - pos));
    pos = end + 1;
    if (s.empty()) continue;
    int v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size())
      fail_one_line(labels_path, ":", line, ": expected an integer label, got '", s, "'");
    if (n < rows.size()) rows[n].fields["label"] = v;
    ++n;
  }
  if (n != rows.size())
    fail_one_line(labels_path, ": ", n, " labels for ", rows.size(), " examples in the data file");
}

// Python's str.capitalize on ASCII: first letter upper, the rest lower.
std::string capitalize(std::string s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    s[i] = char(i == 0 ? std::toupper(c) : std::tolower(c));
  }
  return s;
}

// The harness's HellaSwag clean-up: strip, " [title]" -> ". ", drop
// "[...]" spans (not across lines), one pass of "  " -> " ".
std::string hellaswag_clean(const std::string& in) {
  std::string s = trim(in);
  replace_all(s, " [title]", ". ");
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') {
      const size_t close = s.find_first_of("]\n", i + 1);
      if (close != std::string::npos && s[close] == ']') {
        i = close;
        continue;
      }
    }
    out += s[i];
  }
  replace_all(out, "  ", " ");
  return out;
}

// Original HellaSwag rows gain the fields the harness derives: "query"
// ("<activity_label>: <ctx_a> <Ctx_b>", cleaned) and "choices" (cleaned endings).
void hellaswag_derive(std::vector<Row>& rows) {
  for (Row& r : rows) {
    const std::string ctx = need_text(r, "ctx_a") + " " + capitalize(need_text(r, "ctx_b"));
    r.fields["query"] = hellaswag_clean(need_text(r, "activity_label") + ": " + ctx);
    json choices = json::array();
    for (const std::string& e : ListSpec{"endings", {}}.eval(r))
      choices.push_back(hellaswag_clean(e));
    r.fields["choices"] = std::move(choices);
  }
}

// Whitespace as Python's \s sees it in UTF-8 text: its byte length at `i`
// (0 when none), and the length of the one ending at `end`.
size_t space_at(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (is_ascii_space(char(c)) || (c >= 0x1c && c <= 0x1f)) return 1;
  auto byte = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0; };
  if (c == 0xc2 && (byte(i + 1) == 0x85 || byte(i + 1) == 0xa0)) return 2;
  if (c == 0xe1 && byte(i + 1) == 0x9a && byte(i + 2) == 0x80) return 3;
  if (c == 0xe2 && byte(i + 1) == 0x80 &&
      (byte(i + 2) <= 0x8a || byte(i + 2) == 0xa8 || byte(i + 2) == 0xa9 || byte(i + 2) == 0xaf) &&
      byte(i + 2) >= 0x80)
    return 3;
  if (c == 0xe2 && byte(i + 1) == 0x81 && byte(i + 2) == 0x9f) return 3;
  if (c == 0xe3 && byte(i + 1) == 0x80 && byte(i + 2) == 0x80) return 3;
  return 0;
}
size_t space_before(const std::string& s, size_t begin, size_t end) {
  for (size_t len = 1; len <= 3 && len <= end - begin; ++len)
    if (space_at(s, end - len) == len) return len;
  return 0;
}

// re.sub(open \s* ([^close]*?) \s* close, open \1 close): trims the inside of
// each pair, scanning left to right.
void tidy_pairs(std::string& s, char open, char close) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t o = s.find(open, i);
    const size_t c = o == std::string::npos ? o : s.find(close, o + 1);
    if (c == std::string::npos) break;
    size_t a = o + 1, b = c;
    for (size_t n; a < b && (n = space_at(s, a)) > 0;) a += n;
    for (size_t n; b > a && (n = space_before(s, a, b)) > 0;) b -= n;
    out.append(s, i, o + 1 - i);
    out.append(s, a, b - a);
    out += close;
    i = c + 1;
  }
  out.append(s, i);
  s = std::move(out);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1)
    lines.push_back(text.substr(pos, nl - pos));
  lines.push_back(text.substr(pos));
  return lines;
}

// A top-level WikiText heading (" = Title = ", not " = = Section = = "), as
// the document-level WikiText builder recognises it.
bool wikitext_title(std::string line) {
  replace_all(line, "= = =", "===");
  replace_all(line, "= =", "==");
  line = trim(line);
  return line.size() >= 3 && line.rfind("= ", 0) == 0 &&
         line.compare(line.size() - 2, 2, " =") == 0;
}

}  // namespace

// All rows of one split, through the task's format adapter.
std::vector<Row> read_rows(const Config& c, const std::vector<std::string>& files,
                           const std::string& labels) {
  std::vector<Row> rows;
  for (const std::string& f : files) {
    std::vector<Row> part = c.format == Format::Csv ? read_csv(f) : read_jsonl(f);
    if (c.format == Format::Piqa) attach_labels(part, labels);
    if (c.format == Format::HellaswagOriginal) hellaswag_derive(part);
    std::string file_group = fs::path(f).stem().string();
    if (const size_t u = file_group.rfind('_'); u != std::string::npos && u > 0)
      file_group.resize(u);
    for (Row& r : part) {
      for (const auto& [field, prefix] : c.strip_prefix) {
        const auto it = r.fields.find(field);
        if (it != r.fields.end() && it->is_string() &&
            it->get_ref<const std::string&>().rfind(prefix, 0) == 0)
          *it = it->get<std::string>().substr(prefix.size());
      }
      for (const auto& [field, pairs] : c.replace_suffix) {
        const auto it = r.fields.find(field);
        if (it == r.fields.end() || !it->is_string())
          fail_one_line(r.where, ": replace_suffix: field '", field, "' is missing or not text");
        std::string v = it->get<std::string>();
        bool done = false;
        for (const auto& [suffix, with] : pairs)
          if (!done && v.ends_with(suffix)) {
            v = v.substr(0, v.size() - suffix.size()) + with;
            done = true;
          }
        if (!done)
          fail_one_line(r.where, ": field '", field,
                        "' ends with none of the suffixes in replace_suffix");
        *it = std::move(v);
      }
      if (c.group_by == "file")
        r.group = file_group;
      else if (!c.group_by.empty())
        r.group = need_text(r, c.group_by);
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

// The harness's wikitext_detokenizer, rule for rule (including its literal
// "/' [0-9]/" pattern, which matches a slash-quote-space-digit-slash run).
std::string wikitext_detokenize(std::string s) {
  replace_all(s, "s '", "s'");
  for (size_t i = 0; (i = s.find("/' ", i)) != std::string::npos;) {
    if (i + 4 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 3])) && s[i + 4] == '/') {
      s.replace(i, 5, "/'[0-9]/");
      i += 8;
    } else {
      i += 1;
    }
  }
  replace_all(s, " @-@ ", "-");
  replace_all(s, " @,@ ", ",");
  replace_all(s, " @.@ ", ".");
  for (const char* p : {" : ", " ; ", " . ", " ! ", " ? ", " , "})
    replace_all(s, p, std::string(p + 1));
  tidy_pairs(s, '(', ')');
  tidy_pairs(s, '[', ']');
  tidy_pairs(s, '{', '}');
  tidy_pairs(s, '"', '"');
  tidy_pairs(s, '\'', '\'');
  replace_all(s, "= = = =", "====");
  replace_all(s, "= = =", "===");
  replace_all(s, "= =", "==");
  replace_all(s, " \xc2\xb0 ", "\xc2\xb0");
  replace_all(s, " \n", "\n");
  replace_all(s, "\n ", "\n");
  replace_all(s, " N ", " 1 ");
  replace_all(s, " 's", "'s");
  return s;
}

std::vector<std::string> split_documents(const Config& c, const std::string& path) {
  std::string text = read_file(path, "data file");
  replace_all(text, "\r\n", "\n");
  std::vector<std::string> docs;
  auto add = [&](std::string d) {
    if (!trim(d).empty()) docs.push_back(std::move(d));
  };
  switch (c.split) {
    case Split::File:
      add(text);
      break;
    case Split::Paragraph: {
      std::string cur;
      for (const std::string& line : split_lines(text)) {
        if (trim(line).empty()) {
          add(std::move(cur));
          cur.clear();
        } else {
          cur += (cur.empty() ? "" : "\n") + line;
        }
      }
      add(std::move(cur));
      break;
    }
    case Split::Wikitext: {
      // Each article runs from its title line to the line before the next.
      std::string cur;
      bool first = true;
      for (const std::string& line : split_lines(text)) {
        if (wikitext_title(line)) {
          add(std::move(cur));
          cur.clear();
          first = true;
        }
        cur += (first ? "" : "\n") + line;
        first = false;
      }
      add(std::move(cur));
      break;
    }
    case Split::Separator: {
      size_t pos = 0;
      for (size_t hit; (hit = text.find(c.separator, pos)) != std::string::npos;
           pos = hit + c.separator.size())
        add(trim(std::string_view(text).substr(pos, hit - pos)));
      add(trim(std::string_view(text).substr(pos)));
      break;
    }
  }
  return docs;
}

}  // namespace strata::task_internal
