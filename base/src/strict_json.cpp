// parseStrictJson (sluice/base/strict_json.hpp): nlohmann's SAX parser feeding its own DOM
// builder, with a set of the keys seen so far for each object still open.
#include "sluice/base/strict_json.hpp"

#include <iterator>
#include <optional>
#include <set>
#include <vector>

#include "sluice/base/json.hpp"

namespace sluice::base {

namespace {

// nlohmann's text names its own exception class and repeats the position, which describe()
// gives already: "[json.exception.parse_error.101] parse error at line 1, column 7: syntax
// error while parsing value - ..." becomes "syntax error while parsing value - ...".
std::string plainMessage(std::string_view what) {
  if (what.starts_with("[json.exception.")) {
    const auto end = what.find("] ");
    if (end != std::string_view::npos) what.remove_prefix(end + 2);
  }
  if (what.starts_with("parse error")) {
    const auto colon = what.find(": ");
    if (colon != std::string_view::npos) what.remove_prefix(colon + 2);
  }
  return std::string(what);
}

using nlohmann::json;
using DomBuilder = nlohmann::detail::json_sax_dom_parser<json>;

// A byte iterator that records the offset of the last byte the parser read: nlohmann's SAX
// callbacks carry no position, and a duplicate key is named by where it is. After the lexer
// has read a key, the last byte read is its closing quote (it reads no further ahead).
struct CountingIterator {
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  const char* at = nullptr;
  const char* base = nullptr;
  std::size_t* last_read = nullptr;

  reference operator*() const {
    *last_read = static_cast<std::size_t>(at - base);
    return *at;
  }
  CountingIterator& operator++() {
    ++at;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++at;
    return before;
  }
  bool operator==(const CountingIterator& o) const { return at == o.at; }
  bool operator!=(const CountingIterator& o) const { return at != o.at; }
};

// 1-based line and column of byte offset `offset` (0-based) in `text`.
std::pair<std::size_t, std::size_t> lineColumn(std::string_view text, std::size_t offset) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

// The offset of the opening quote of the string whose closing quote is at `close`: the last
// quote before it that no backslash escapes.
std::size_t openingQuote(std::string_view text, std::size_t close) {
  for (std::size_t i = close; i-- > 0;) {
    if (text[i] != '"') continue;
    std::size_t slashes = 0;
    for (std::size_t j = i; j-- > 0 && text[j] == '\\';) ++slashes;
    if (slashes % 2 == 0) return i;
  }
  return 0;
}

// The DOM builder, plus the keys of each open object (an array level holds no set).
class StrictHandler {
 public:
  StrictHandler(json& out, std::string_view text, const std::size_t& last_read)
      : dom_(out, false), text_(text), last_read_(last_read) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return dom_.number_float(v, s);
  }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    keys_.emplace_back(std::set<std::string>{});
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (!keys_.back()->insert(k).second) {
      auto [line, col] = lineColumn(text_, openingQuote(text_, last_read_));
      error_ =
          JsonParseError{"duplicate key " + dumpJson(json(k)) + " (an object may name a key once)",
                         line, col, true};
      return false;
    }
    return dom_.key(k);
  }
  bool end_object() {
    keys_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    keys_.emplace_back(std::nullopt);
    return dom_.start_array(n);
  }
  bool end_array() {
    keys_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception& e) {
    // `byte` is 1-based: the byte the lexer stopped at.
    auto [line, col] = lineColumn(text_, byte == 0 ? 0 : byte - 1);
    error_ = JsonParseError{plainMessage(e.what()), line, col, false};
    return false;
  }

  const std::optional<JsonParseError>& error() const { return error_; }

 private:
  DomBuilder dom_;
  std::string_view text_;
  const std::size_t& last_read_;
  std::vector<std::optional<std::set<std::string>>> keys_;
  std::optional<JsonParseError> error_;
};

}  // namespace

std::string JsonParseError::describe() const {
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message;
}

std::expected<json, JsonParseError> parseStrictJson(std::string_view text) {
  json out;
  std::size_t last_read = 0;
  StrictHandler handler(out, text, last_read);
  CountingIterator first{text.data(), text.data(), &last_read};
  CountingIterator last{text.data() + text.size(), text.data(), &last_read};
  const bool ok = json::sax_parse(first, last, &handler);
  if (handler.error()) return std::unexpected(*handler.error());
  if (!ok) return std::unexpected(JsonParseError{"not valid JSON", 1, 1, false});
  return out;
}

}  // namespace sluice::base
