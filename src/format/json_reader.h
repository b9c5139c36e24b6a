// A strict JSON pull reader for the large machine-written files of a checkpoint (safetensors
// headers, the ~500k-entry K3 shard index): it hands out strings as views into the input when they
// hold no escapes, so reading a header allocates almost nothing. RFC 8259 grammar, UTF-8 checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deltafin::format::detail {

class JsonReader {
 public:
  enum class Type { kObject, kArray, kString, kNumber, kBool, kNull };
  static const char* type_name(Type type);  // "an object", "a string", ...

  // `what` names the input in errors ("file X: safetensors header").
  JsonReader(std::string_view text, std::string what);

  Type peek();  // the type of the next value (skips whitespace)

  // Objects: begin_object(); while (next_key(&key)) { read or skip the value }.
  void begin_object();
  bool next_key(std::string_view* key);  // false at '}'; the key stays valid until the next key
  // Arrays: begin_array(); while (next_element()) { read or skip the value }.
  void begin_array();
  bool next_element();  // false at ']'

  std::string_view read_string();  // valid until the next string value is read
  std::string_view read_number();  // the number's text, checked against the JSON grammar
  bool read_bool();
  void read_null();
  void skip_value();
  void expect_end();  // nothing but whitespace may follow

  // Errors name the input and the byte offset.
  [[noreturn]] void fail(const std::string& message) const;

 private:
  static constexpr size_t kMaxDepth = 256;
  static constexpr uint8_t kFirstBit = 1;   // no member read yet
  static constexpr uint8_t kObjectBit = 2;  // an object (else an array)

  void skip_ws();
  char next_char_or_fail(const char* expected);
  void expect(char c);
  std::string_view read_string_into(std::string& scratch);
  void append_escape(std::string& out);
  void open_container(uint8_t kind_bit);

  std::string_view text_;
  size_t pos_ = 0;
  std::string what_;
  std::vector<uint8_t> stack_;  // one entry per open container
  std::string key_scratch_, value_scratch_;
};

// A number token holding a non-negative integer below 2^64 (no sign, fraction or exponent).
bool json_number_to_u64(std::string_view token, uint64_t* value);

}  // namespace deltafin::format::detail
