// Output formats of `sluice audit`: aligned table, JSON document, RFC 4180 CSV.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "sluice/audit/reader.hpp"
#include "sluice/base/json.hpp"

namespace sluice::audit {
namespace {

constexpr std::size_t kMaxTableCell = 80;

std::string cellText(const Cell& c) {
  switch (c.index()) {
    case 1:
      return std::to_string(std::get<std::int64_t>(c));
    case 2:
      return fmt::format("{}", std::get<double>(c));
    case 3:
      return std::get<std::string>(c);
    default:
      return {};
  }
}

/// Display width of UTF-8 text: counts code points (not bytes), good enough for alignment.
std::size_t width(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  return n;
}

std::string tableCell(const Cell& c) {
  std::string raw = cellText(c);
  std::string out;
  out.reserve(raw.size());
  for (char ch : raw) {
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += ' ';
    } else {
      out += ch;
    }
  }
  if (width(out) > kMaxTableCell) {
    // Cut on a code point boundary.
    std::size_t bytes = 0, points = 0;
    while (bytes < out.size() && points < kMaxTableCell - 3) {
      ++bytes;
      while (bytes < out.size() && (static_cast<unsigned char>(out[bytes]) & 0xC0) == 0x80) ++bytes;
      ++points;
    }
    out.resize(bytes);
    out += "...";
  }
  return out;
}

std::string formatTable(const ResultTable& t) {
  std::size_t n = t.columns.size();
  std::vector<std::vector<std::string>> cells;
  std::vector<std::size_t> widths(n);
  std::vector<bool> numeric(n, true);
  for (std::size_t i = 0; i < n; ++i) widths[i] = width(t.columns[i]);
  for (const auto& row : t.rows) {
    std::vector<std::string> r;
    for (std::size_t i = 0; i < n; ++i) {
      r.push_back(tableCell(row[i]));
      widths[i] = std::max(widths[i], width(r.back()));
      if (row[i].index() == 3) numeric[i] = false;
    }
    cells.push_back(std::move(r));
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& r, bool header) {
    std::string l;
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t pad = widths[i] - width(r[i]);
      if (i) l += "  ";
      // Numbers are right-aligned so digits line up; headers follow their column.
      if (numeric[i] && !t.rows.empty()) {
        l.append(pad, ' ');
        l += r[i];
      } else {
        l += r[i];
        if (i + 1 < n) l.append(pad, ' ');
      }
    }
    (void)header;
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l;
    out += '\n';
  };
  line(t.columns, true);
  std::vector<std::string> rule;
  for (std::size_t i = 0; i < n; ++i) rule.push_back(std::string(widths[i], '-'));
  line(rule, true);
  for (const auto& r : cells) line(r, false);
  return out;
}

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  out += '"';
  return out;
}

std::string formatCsv(const ResultTable& t) {
  std::string out;
  auto line = [&](auto&& fields) {
    bool first = true;
    for (const auto& f : fields) {
      if (!first) out += ',';
      first = false;
      out += csvField(f);
    }
    out += "\r\n";  // RFC 4180 line break
  };
  line(t.columns);
  for (const auto& row : t.rows) {
    std::vector<std::string> fields;
    for (const auto& c : row) fields.push_back(cellText(c));
    line(fields);
  }
  return out;
}

nlohmann::ordered_json jsonCell(const Cell& c, bool is_json) {
  switch (c.index()) {
    case 1:
      return std::get<std::int64_t>(c);
    case 2:
      return std::get<double>(c);
    case 3: {
      const auto& s = std::get<std::string>(c);
      if (is_json) {
        auto parsed = nlohmann::ordered_json::parse(s, nullptr, false);
        if (!parsed.is_discarded()) return parsed;
      }
      return s;
    }
    default:
      return nullptr;
  }
}

}  // namespace

std::expected<OutputFormat, base::Error> parseFormat(std::string_view name) {
  if (name == "table") return OutputFormat::kTable;
  if (name == "json") return OutputFormat::kJson;
  if (name == "csv") return OutputFormat::kCsv;
  return std::unexpected(
      base::Error{base::Code::kInvalidArgument,
                  "unknown format '" + std::string(name) + "' (table, json or csv)"});
}

std::string formatResult(const ResultTable& t, OutputFormat format) {
  switch (format) {
    case OutputFormat::kTable:
      return formatTable(t);
    case OutputFormat::kCsv:
      return formatCsv(t);
    case OutputFormat::kJson: {
      auto arr = nlohmann::ordered_json::array();
      for (const auto& row : t.rows) {
        nlohmann::ordered_json obj = nlohmann::ordered_json::object();
        for (std::size_t i = 0; i < t.columns.size(); ++i) {
          bool is_json = i < t.json_columns.size() && t.json_columns[i];
          obj[t.columns[i]] = jsonCell(row[i], is_json);
        }
        arr.push_back(std::move(obj));
      }
      // Replace invalid UTF-8 rather than throw: the data plane may have logged odd bytes.
      return base::dumpJson(arr, 2) + "\n";
    }
  }
  return {};
}

}  // namespace sluice::audit
