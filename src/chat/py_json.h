// The few Python behaviours K3's encoder (encoding_k3.py) relies on, reproduced on nlohmann JSON
// values: json.dumps(ensure_ascii=False) with either separator style, str() of scalars,
// truthiness, str.strip() emptiness, and recursive key sorting.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace deltafin::chat {

// Object keys keep their input order, as in a Python dict built by json.loads.
using Json = nlohmann::ordered_json;

// json.dumps(value, ensure_ascii=False) with separators (", ", ": ") or, compact, (",", ":").
// Floats are written as Python's repr writes them (shortest round trip, "1e-05", "1e+16", "2.0").
std::string py_json_dumps(const Json& value, bool compact);

// str(value) for a scalar: strings as they are, True/False, None, ints, floats as repr. nullopt
// for arrays and objects, whose Python repr the encoder never means to render.
std::optional<std::string> py_str(const Json& value);

// Python truthiness: null, false, 0, "", [] and {} are false.
bool py_truthy(const Json& value);

// Whether str.strip() would leave nothing (only str.isspace() characters).
bool py_is_blank(const std::string& text);

// str.strip(): removes leading and trailing str.isspace() characters.
std::string py_strip(const std::string& text);

// Every object's keys sorted (code point order), recursively, as deep_sort_dict does.
Json deep_sort(const Json& value);

}  // namespace deltafin::chat
