// Values of strata's Jinja interpreter (core/jinja.h), with Python's
// semantics where templates see them: str() and repr() as Python prints
// them (True, None, 1.0, ['a', "b's"]), truthiness, ==, ordering, and JSON
// in and out with dict keys in insertion order. Lists and dicts are shared
// by reference, as in Python (a namespace's attribute set is seen by every
// holder). Strings are UTF-8; lengths, indices and slices count code points.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/text.h"

namespace strata::jinja {

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order

// A call's arguments: f(1, 2, key=3).
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};
using Function = std::function<Value(Args&)>;

// A double truncated toward zero into int64, saturating (NaN: 0).
inline int64_t float_to_int(double d) {
  if (!(d == d)) return 0;
  if (d >= 9223372036854775807.0) return INT64_MAX;
  if (d <= -9223372036854775808.0) return INT64_MIN;
  return int64_t(d);
}

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

  Value() = default;  // undefined
  Value(std::nullptr_t) : kind_(Kind::None) {}
  Value(bool b) : kind_(Kind::Bool), i_(b) {}
  Value(int i) : kind_(Kind::Int), i_(i) {}
  Value(int64_t i) : kind_(Kind::Int), i_(i) {}
  Value(double d) : kind_(Kind::Float), d_(d) {}
  Value(std::string s) : kind_(Kind::String), s_(std::move(s)) {}
  Value(std::string_view s) : kind_(Kind::String), s_(s) {}
  Value(const char* s) : kind_(Kind::String), s_(s) {}

  static Value list(List items = {});
  // A tuple: a list that prints as (1, 2) and (1,).
  static Value tuple(List items);
  static Value dict(Dict entries = {});
  // A namespace(): a dict whose attributes {% set ns.x = ... %} may assign.
  static Value name_space(Dict entries = {});
  static Value function(Function f);
  // An undefined value; `what` names it for errors ("'x' is undefined").
  static Value undefined(std::string what);
  static Value from_json(const nlohmann::ordered_json& j);
  static Value from_json(const nlohmann::json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const {
    return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool;
  }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Dict && name_space_; }
  bool is_tuple() const { return kind_ == Kind::List && tuple_; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return i_ != 0; }
  // A float truncated toward zero, saturated at the int64 range (NaN: 0).
  int64_t as_int() const { return kind_ == Kind::Float ? float_to_int(d_) : i_; }
  double as_double() const { return kind_ == Kind::Float ? d_ : double(i_); }
  const std::string& as_string() const { return s_; }
  // For undefined values: what is undefined ("'x' is undefined", "'dict
  // object' has no attribute 'y'").
  const std::string& undefined_message() const { return s_; }
  const List& items() const { return *list_; }
  List& items() { return *list_; }
  const Dict& entries() const { return *dict_; }
  Dict& entries() { return *dict_; }
  const Function& fn() const { return *fn_; }
  // Whether the value can be called: a function, or a dict given a call
  // (Jinja's loop object in a recursive loop).
  bool callable() const { return fn_ != nullptr; }
  void set_call(Function f) { fn_ = std::make_shared<Function>(std::move(f)); }

  // The dict's value for `key`, or nullptr.
  const Value* find(std::string_view key) const;
  // Sets (or adds) a dict entry.
  void set(const std::string& key, Value v);

  bool truthy() const;       // Python's bool(); undefined is false
  std::string str() const;   // Python's str(); undefined is ""
  std::string repr() const;  // Python's repr()
  // Python's len() for strings (code points), lists and dicts; -1 otherwise.
  int64_t length() const;
  // The value as JSON (throws strata::Error for undefined and functions).
  nlohmann::ordered_json to_json() const;
  // A name for messages: "str", "int", "list", "dict", ...
  const char* type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  int64_t i_ = 0;
  double d_ = 0;
  bool name_space_ = false, tuple_ = false;
  std::string s_;  // a string, or an undefined value's message
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

// Python's == (1 == 1.0 == True; lists and dicts element by element).
bool equal(const Value& a, const Value& b);
// Python's < for numbers, strings and lists; throws strata::Error (with
// `what` first) for values Python cannot order.
bool less(const Value& a, const Value& b);

// Python's repr of a float: the shortest digits that round-trip, in fixed
// notation for exponents -4..15 ("0.0001", "1e+16", "1.0").
std::string float_repr(double d);
// Python's repr of a string: single quotes unless it holds ' and no ".
std::string string_repr(std::string_view s);
// Python's json.dumps: separators (", ", ": ") without indent, ("," ": ")
// with one; ensure_ascii escapes everything above U+007F.
struct JsonStyle {
  int indent = -1;  // <0: one line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator, key_separator;  // "" for json.dumps's defaults
};
std::string dump_json(const Value& v, const JsonStyle& style);

// UTF-8 helpers for code-point indexing: the byte offset of every code
// point's start, and the end (one past the last code point).
std::vector<size_t> code_point_offsets(std::string_view s);
// The code point at s[i], advancing i past it; a byte that does not start
// valid UTF-8 is returned as itself.
inline uint32_t next_code_point(std::string_view s, size_t& i) {
  return strata::next_code_point(s, &i);  // core/text.h's decoder
}
// Python's str.isspace() for one code point.
bool is_python_space(uint32_t cp);

}  // namespace strata::jinja
