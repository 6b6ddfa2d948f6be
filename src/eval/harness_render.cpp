// The harness's doc_to_text / doc_to_target / doc_to_choice on one document
// (eval/harness_internal.h), as lm_eval's ConfigurableTask computes them.
#include <cctype>

#include "core/error.h"
#include "core/jinja.h"
#include "core/text.h"
#include "eval/harness_internal.h"

namespace strata::harness_internal {

namespace {

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string text_of_json(const json& v) {
  return v.is_string() ? v.get<std::string>() : jinja::Value::from_json(v).str();
}

}  // namespace

const jinja::Template& Render::tmpl(const std::string& key, const std::string& source) {
  auto& slot = cache_[key + '\0' + source];
  if (!slot)
    slot =
        std::make_unique<jinja::Template>(source, s_.file + ": " + key, jinja::harness_options());
  return *slot;
}

const jinja::Value& Render::vars(const Doc& d) {
  if (vars_of_ != &d) {
    vars_ = jinja::Value::from_json(d.fields);
    vars_of_ = &d;
  }
  return vars_;
}

json Render::field(const json& spec, const Doc& d, const std::string& key) {
  if (spec.is_number_integer()) return spec;
  if (spec.is_string()) {
    const std::string src = spec.get<std::string>();
    if (d.fields.contains(src)) return d.fields[src];  // a column
    std::string out;
    try {
      out = tmpl(key, src).render(vars(d));
    } catch (const Error& e) {
      fail(cat(d.where, ": ", e.what()));
    }
    if (s_.has_choice && all_digits(out) && out.size() < 19) return std::stoll(out);
    // The harness reads a bracketed target as a Python literal (a list of
    // accepted answers), keeping the text when it is not one.
    if (key == "doc_to_target" && out.size() >= 2 && out.front() == '[' && out.back() == ']') {
      try {
        const jinja::Value v = jinja::literal_eval(out);
        if (v.is_list()) return v.to_json();
      } catch (const Error&) {
      }
    }
    return out;
  }
  if (spec.is_array()) return spec;
  fail(cat(s_.file, ": task '", s_.name, "': ", key, " must be a template, a column or a number"));
}

std::string Render::text(const Doc& d) { return text_of_json(text_value(d)); }

json Render::text_value(const Doc& d) { return field(*s_.doc_to_text, d, "doc_to_text"); }

json Render::target(const Doc& d) { return field(*s_.doc_to_target, d, "doc_to_target"); }

std::string Render::text_of(const json& spec, const Doc& d, const std::string& key) {
  if (spec.is_string() && !d.fields.contains(spec.get<std::string>())) {
    try {
      return tmpl(key, spec.get<std::string>()).render(vars(d));
    } catch (const Error& e) {
      fail(cat(d.where, ": ", e.what()));
    }
  }
  return text_of_json(field(spec, d, key));
}

std::vector<std::string> Render::choices(const Doc& d) {
  const json& spec = *s_.doc_to_choice;
  std::vector<std::string> out;
  auto from_list = [&](const json& list) {
    for (const json& e : list) out.push_back(text_of_json(e));
  };
  if (spec.is_string()) {
    const std::string src = spec.get<std::string>();
    if (d.fields.contains(src)) {
      const json& col = d.fields[src];
      STRATA_CHECK(col.is_array(), d.where, ": doc_to_choice column '", src, "' is not a list");
      from_list(col);
      return out;
    }
    jinja::Value v;
    try {
      v = tmpl("doc_to_choice", src).evaluate(vars(d));
    } catch (const Error& e) {
      fail(cat(d.where, ": ", e.what()));
    }
    if (v.is_list()) {
      for (const jinja::Value& e : v.items()) out.push_back(e.str());
      return out;
    }
    return python_list(v.str(), d.where + ": doc_to_choice");
  }
  if (spec.is_array()) {
    for (const json& e : spec)
      out.push_back(e.is_string() ? text_of(e, d, "doc_to_choice") : text_of_json(e));
    return out;
  }
  if (spec.is_object()) {
    for (auto it = spec.begin(); it != spec.end(); ++it) out.push_back(text_of_json(it.value()));
    return out;
  }
  fail(
      cat(s_.file, ": task '", s_.name, "': doc_to_choice must be a template, a column or a list"));
}

int gold_index(const json& target, const std::vector<std::string>& choices,
               const std::string& where) {
  int64_t g = -1;
  if (target.is_number_integer()) {
    g = target.get<int64_t>();
  } else if (target.is_array() && !target.empty()) {
    return gold_index(target[0], choices, where);
  } else if (target.is_string()) {
    const std::string t = target.get<std::string>();
    for (size_t i = 0; i < choices.size() && g < 0; ++i)
      if (choices[i] == t) g = int64_t(i);
    if (g < 0) fail(cat(where, ": the target '", t, "' is not one of the choices"));
  }
  STRATA_CHECK(g >= 0 && size_t(g) < choices.size(), where, ": gold ", g, " out of range for ",
               choices.size(), " choices");
  return int(g);
}

std::vector<std::string> python_list(const std::string& text, const std::string& where) {
  std::vector<std::string> out;
  size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  auto bad = [&](const char* what) {
    fail(cat(where, ": '", one_line(text.substr(0, 80)), "' is not a Python list of strings (",
             what, ")"));
  };
  skip();
  if (i >= text.size() || (text[i] != '[' && text[i] != '(')) bad("no opening bracket");
  const char close = text[i] == '[' ? ']' : ')';
  ++i;
  for (;;) {
    skip();
    if (i < text.size() && text[i] == close) {
      ++i;
      break;
    }
    if (i >= text.size()) bad("unclosed");
    if (text[i] == '\'' || text[i] == '"') {
      const char q = text[i++];
      std::string s;
      while (i < text.size() && text[i] != q) {
        if (text[i] == '\\' && i + 1 < text.size()) {
          const char e = text[++i];
          s += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          s += text[i];
        }
        ++i;
      }
      if (i >= text.size()) bad("unterminated string");
      ++i;
      out.push_back(s);
    } else {
      const size_t start = i;
      while (i < text.size() && text[i] != ',' && text[i] != close) ++i;
      std::string tok = text.substr(start, i - start);
      while (!tok.empty() && std::isspace(static_cast<unsigned char>(tok.back()))) tok.pop_back();
      if (tok.empty() || tok.find_first_not_of("-+0123456789.eE") != std::string::npos)
        bad("an item that is neither a string nor a number");
      out.push_back(tok);
    }
    skip();
    if (i < text.size() && text[i] == ',') ++i;
  }
  skip();
  if (i != text.size()) bad("text after the list");
  return out;
}

}  // namespace strata::harness_internal
