// The row descriptions of the chained tables; see rows.hpp. Changing a column's name, order or
// value changes every row hash: the order here is the encoding order of docs/audit.md.
#include "rows.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>

#include "sluice/audit/event_text.hpp"
#include "sluice/base/json.hpp"

namespace sluice::audit::detail {
namespace {

// How a value is taken from the event. `M` is a pointer to the event's member.

/// Text as it is (an empty string is stored as '').
template <auto M>
Value text(const auto& e, std::string&) {
  return Value{std::string_view(e.*M)};
}

/// Text, or NULL when empty (optional columns store NULL rather than "").
template <auto M>
Value textOrNull(const auto& e, std::string&) {
  return detail::textOrNull(e.*M);
}

/// An enum as its text (event_text.hpp, the one mapping). Never empty, so never NULL: the
/// producers always set these columns.
template <auto M>
Value enumText(const auto& e, std::string&) {
  return Value{textOf(e.*M)};
}

/// An integer (ints, bools as 0 | 1); unsigned 64-bit counts are clamped to INT64_MAX.
template <auto M>
Value integer(const auto& e, std::string&) {
  const auto v = e.*M;
  if constexpr (std::is_same_v<std::remove_cv_t<decltype(v)>, std::uint64_t>) {
    constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    return Value{static_cast<std::int64_t>(std::min(v, kMax))};
  } else {
    return Value{static_cast<std::int64_t>(v)};
  }
}

/// A list of strings as a JSON array. Invalid UTF-8 is replaced rather than thrown on:
/// nothing may kill the writer thread.
template <auto M>
Value jsonList(const auto& e, std::string& buffer) {
  return Value{jsonStringList(e.*M, buffer)};
}

}  // namespace

std::string_view jsonStringList(const std::vector<std::string>& list, std::string& buffer) {
  // Most rows have none: "[]" is what dumpJson writes for an empty array.
  if (list.empty()) return "[]";
  // nlohmann escapes '"', '\\' and control characters and checks UTF-8; a string of printable
  // ASCII without the two needs neither, and its JSON is the string in quotes.
  const bool plain = std::all_of(list.begin(), list.end(), [](const std::string& s) {
    return std::all_of(s.begin(), s.end(),
                       [](char c) { return c >= 0x20 && c < 0x7F && c != '"' && c != '\\'; });
  });
  if (!plain) {
    buffer = base::dumpJson(nlohmann::json(list));
    return buffer;
  }
  buffer.clear();
  buffer += '[';
  for (const std::string& s : list) {
    if (buffer.size() > 1) buffer += ',';
    buffer += '"';
    buffer += s;
    buffer += '"';
  }
  buffer += ']';
  return buffer;
}

namespace {

// A row's PolicyStamp (event_sink.hpp), the optional tail of connections, requests and
// dns_queries (version 7).

template <typename Event>
Value generationOf(const Event& e, std::string&) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  const std::uint64_t g = e.stamp.policy_generation;
  return g == 0 ? Value{} : Value{static_cast<std::int64_t>(std::min(g, kMax))};
}

template <typename Event>
Value shadowDecisionOf(const Event& e, std::string&) {
  return e.stamp.shadow_decision ? Value{textOf(*e.stamp.shadow_decision)} : Value{};
}

template <typename Event>
Value shadowRuleOf(const Event& e, std::string&) {
  return detail::textOrNull(e.stamp.shadow_rule);
}

/// The column names of a Column list, at compile time.
template <typename Event, std::size_t N>
constexpr std::array<std::string_view, N> namesOf(const std::array<Column<Event>, N>& columns) {
  std::array<std::string_view, N> names{};
  for (std::size_t i = 0; i < N; ++i) names[i] = columns[i].name;
  return names;
}

template <typename Event, std::size_t N>
constexpr std::array<ColumnKind, N> kindsOf(const std::array<Column<Event>, N>& columns) {
  std::array<ColumnKind, N> kinds{};
  for (std::size_t i = 0; i < N; ++i) kinds[i] = columns[i].kind;
  return kinds;
}

constexpr auto kTime = ColumnKind::kTime;
constexpr auto kJson = ColumnKind::kJson;

using X = ExecutionRecord;
constexpr auto kExecutionColumns = std::to_array<Column<X>>({
    {"id", text<&X::id>},
    {"workflow", text<&X::workflow>},
    {"policy_sha256", textOrNull<&X::policy_sha256>},
    {"argv", textOrNull<&X::argv_json>, kJson},
    {"started_at", integer<&X::started_at_ms>, kTime},
    {"ended_at", integer<&X::ended_at_ms>, kTime},
    {"exit_code", integer<&X::exit_code>},
    {"signal", integer<&X::signal>},
    {"limit_hit", textOrNull<&X::limit_hit>},
    {"usage", textOrNull<&X::usage_json>, kJson},
    {"stdout_bytes", integer<&X::stdout_bytes>},
    {"stderr_bytes", integer<&X::stderr_bytes>},
    {"stdout_truncated", integer<&X::stdout_truncated>},
    {"stderr_truncated", integer<&X::stderr_truncated>},
    {"artifacts", textOrNull<&X::artifacts_json>, kJson},
    {"receipt", textOrNull<&X::receipt_json>, kJson},
});

using C = ConnectionEvent;
constexpr auto kConnectionColumns = std::to_array<Column<C>>({
    {"id", text<&C::id>},
    {"execution_id", textOrNull<&C::execution_id>},
    {"workflow", text<&C::workflow>},
    {"policy_sha256", textOrNull<&C::policy_sha256>},
    {"ts", integer<&C::ts_ms>, kTime},
    {"kind", enumText<&C::kind>},
    {"host", text<&C::host>},
    {"port", integer<&C::port>},
    {"resolved_ip", textOrNull<&C::resolved_ip>},
    {"decision", enumText<&C::decision>},
    {"rule_id", textOrNull<&C::rule_id>},
    {"reason", textOrNull<&C::reason>},
    {"detail", textOrNull<&C::detail>},
    {"tls", enumText<&C::tls>},
    {"bytes_up", integer<&C::bytes_up>},
    {"bytes_down", integer<&C::bytes_down>},
    {"duration_ms", integer<&C::duration_ms>},
    {"policy_generation", generationOf<C>},
    {"shadow_decision", shadowDecisionOf<C>},
    {"shadow_rule", shadowRuleOf<C>},
});

using R = RequestEvent;
constexpr auto kRequestColumns = std::to_array<Column<R>>({
    {"connection_id", textOrNull<&R::connection_id>},
    {"execution_id", textOrNull<&R::execution_id>},
    {"workflow", text<&R::workflow>},
    {"ts", integer<&R::ts_ms>, kTime},
    {"method", textOrNull<&R::method>},
    {"host", textOrNull<&R::host>},
    {"path", textOrNull<&R::path>},
    {"status", integer<&R::status>},
    {"decision", enumText<&R::decision>},
    {"rule_id", textOrNull<&R::rule_id>},
    {"reason", textOrNull<&R::reason>},
    {"injected_secrets", jsonList<&R::injected_secrets>, kJson},
    {"policy_generation", generationOf<R>},
    {"shadow_decision", shadowDecisionOf<R>},
    {"shadow_rule", shadowRuleOf<R>},
});

using F = ForwardEvent;
constexpr auto kForwardColumns = std::to_array<Column<F>>({
    {"connection_id", textOrNull<&F::connection_id>},
    {"execution_id", textOrNull<&F::execution_id>},
    {"workflow", text<&F::workflow>},
    {"ts", integer<&F::ts_ms>, kTime},
    {"method", textOrNull<&F::method>},
    {"host", textOrNull<&F::host>},
    {"path", textOrNull<&F::path>},
    {"rule_id", textOrNull<&F::rule_id>},
    {"attempt", integer<&F::attempt>},
    {"injected_secrets", jsonList<&F::injected_secrets>, kJson},
});

using D = DnsEvent;
constexpr auto kDnsColumns = std::to_array<Column<D>>({
    {"execution_id", textOrNull<&D::execution_id>},
    {"workflow", text<&D::workflow>},
    {"ts", integer<&D::ts_ms>, kTime},
    {"name", textOrNull<&D::name>},
    {"qtype", textOrNull<&D::qtype>},
    {"answer", textOrNull<&D::answer>},
    {"decision", enumText<&D::decision>},
    {"rule_id", textOrNull<&D::rule_id>},
    {"reason", textOrNull<&D::reason>},
    {"policy_generation", generationOf<D>},
    {"shadow_decision", shadowDecisionOf<D>},
    {"shadow_rule", shadowRuleOf<D>},
});

using A = ApprovalEvent;
constexpr auto kApprovalColumns = std::to_array<Column<A>>({
    {"id", text<&A::id>},
    {"execution_id", textOrNull<&A::execution_id>},
    {"session_id", textOrNull<&A::session_id>},
    {"workflow", text<&A::workflow>},
    {"caller", textOrNull<&A::caller>},
    {"rule_id", textOrNull<&A::rule_id>},
    {"host", text<&A::host>},
    {"port", integer<&A::port>},
    {"method", textOrNull<&A::method>},
    {"path", textOrNull<&A::path>},
    {"decision", enumText<&A::decision>},
    {"reason", textOrNull<&A::reason>},
    {"scope", enumText<&A::scope>},
    {"decided_by", textOrNull<&A::decided_by>},
    {"asked_at", integer<&A::asked_at_ms>, kTime},
    {"decided_at", integer<&A::decided_at_ms>, kTime},
});

/// Version 6: policy texts are chained rows too, so their workflow and loaded_at are covered.
using P = PolicyRecord;
constexpr auto kPolicyColumns = std::to_array<Column<P>>({
    {"sha256", text<&P::sha256>},
    {"workflow", text<&P::workflow>},
    {"yaml", text<&P::yaml>},
    {"loaded_at", integer<&P::loaded_at>, kTime},
});

// Derived, for the untyped ChainTable.
constexpr auto kExecutionNames = namesOf(kExecutionColumns);
constexpr auto kExecutionKinds = kindsOf(kExecutionColumns);
constexpr auto kConnectionNames = namesOf(kConnectionColumns);
constexpr auto kConnectionKinds = kindsOf(kConnectionColumns);
constexpr auto kRequestNames = namesOf(kRequestColumns);
constexpr auto kRequestKinds = kindsOf(kRequestColumns);
constexpr auto kForwardNames = namesOf(kForwardColumns);
constexpr auto kForwardKinds = kindsOf(kForwardColumns);
constexpr auto kDnsNames = namesOf(kDnsColumns);
constexpr auto kDnsKinds = kindsOf(kDnsColumns);
constexpr auto kApprovalNames = namesOf(kApprovalColumns);
constexpr auto kApprovalKinds = kindsOf(kApprovalColumns);
constexpr auto kPolicyNames = namesOf(kPolicyColumns);
constexpr auto kPolicyKinds = kindsOf(kPolicyColumns);

// Guarded by json_valid: reading caller from a receipt that is not JSON would fail the
// statement; such a receipt fails the row's hash anyway.
constexpr std::string_view kExecutionsGenerated =
    "CASE WHEN json_valid(receipt) THEN caller IS json_extract(receipt, '$.caller') AND "
    "session_id IS json_extract(receipt, '$.session_id') ELSE 1 END";

/// policy_generation, shadow_decision, shadow_rule (version 7).
constexpr std::size_t kStampColumns = 3;

const std::array<ChainTable, kChainTableCount> kTables = {{
    {0, "executions", kExecutionNames, kExecutionKinds, "started_at", "id", kExecutionsGenerated},
    {1, "connections", kConnectionNames, kConnectionKinds, "ts", "id", "1", false, kStampColumns},
    {2, "requests", kRequestNames, kRequestKinds, "ts", "", "id IS seq", false, kStampColumns},
    {3, "forwards", kForwardNames, kForwardKinds, "ts", ""},
    {4, "dns_queries", kDnsNames, kDnsKinds, "ts", "", "1", false, kStampColumns},
    {5, "approvals", kApprovalNames, kApprovalKinds, "asked_at", "id"},
    {6, "policies", kPolicyNames, kPolicyKinds, "loaded_at", "sha256", "1", true},
}};

static_assert(std::max({kExecutionColumns.size(), kConnectionColumns.size(), kRequestColumns.size(),
                        kForwardColumns.size(), kDnsColumns.size(), kApprovalColumns.size(),
                        kPolicyColumns.size()}) <= kMaxColumns);

}  // namespace

template <>
const RowDescription<ExecutionRecord>& rowOf<ExecutionRecord>() {
  static const RowDescription<ExecutionRecord> row{kTables[0], kExecutionColumns};
  return row;
}
template <>
const RowDescription<ConnectionEvent>& rowOf<ConnectionEvent>() {
  static const RowDescription<ConnectionEvent> row{kTables[1], kConnectionColumns};
  return row;
}
template <>
const RowDescription<RequestEvent>& rowOf<RequestEvent>() {
  static const RowDescription<RequestEvent> row{kTables[2], kRequestColumns};
  return row;
}
template <>
const RowDescription<ForwardEvent>& rowOf<ForwardEvent>() {
  static const RowDescription<ForwardEvent> row{kTables[3], kForwardColumns};
  return row;
}
template <>
const RowDescription<DnsEvent>& rowOf<DnsEvent>() {
  static const RowDescription<DnsEvent> row{kTables[4], kDnsColumns};
  return row;
}
template <>
const RowDescription<ApprovalEvent>& rowOf<ApprovalEvent>() {
  static const RowDescription<ApprovalEvent> row{kTables[5], kApprovalColumns};
  return row;
}
template <>
const RowDescription<PolicyRecord>& rowOf<PolicyRecord>() {
  static const RowDescription<PolicyRecord> row{kTables[6], kPolicyColumns};
  return row;
}

const std::array<ChainTable, kChainTableCount>& chainTables() { return kTables; }

const ChainTable* findChainTable(std::string_view name) {
  for (const auto& t : kTables) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::span<const Value> hashedValues(const ChainTable& t, std::span<const Value> values) {
  const std::size_t tail = std::min(t.optional_tail, values.size());
  const auto rest = values.last(tail);
  const bool unset = std::all_of(rest.begin(), rest.end(), [](const Value& v) {
    return std::holds_alternative<std::monostate>(v);
  });
  return unset ? values.first(values.size() - tail) : values;
}

std::string insertSql(const ChainTable& t) {
  std::string cols = "seq, prev_hash, hash";
  std::string params = "?1, ?2, ?3";
  for (std::size_t i = 0; i < t.columns.size(); ++i) {
    cols += fmt::format(", {}", t.columns[i]);
    params += fmt::format(", ?{}", i + 4);
  }
  return fmt::format("{} INTO {} ({}) VALUES ({})",
                     t.insert_or_ignore ? "INSERT OR IGNORE" : "INSERT", t.name, cols, params);
}

void bindRow(Stmt& stmt, std::int64_t seq, std::string_view prev_hash, std::string_view hash,
             std::span<const Value> values) {
  stmt.bindInt(1, seq);
  stmt.bindText(2, prev_hash);
  stmt.bindText(3, hash);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const int index = static_cast<int>(i + 4);
    if (auto* n = std::get_if<std::int64_t>(&values[i])) {
      stmt.bindInt(index, *n);
    } else if (auto* s = std::get_if<std::string_view>(&values[i])) {
      stmt.bindText(index, *s);
    } else {
      stmt.bindNull(index);  // the writer's values are never Real or Blob
    }
  }
}

RowArena::Span RowArena::append(std::span<const Value> values) {
  const Span row{static_cast<std::uint32_t>(cells_.size()),
                 static_cast<std::uint32_t>(values.size())};
  for (const Value& v : values) {
    Cell c;
    c.kind = static_cast<std::uint8_t>(v.index());
    std::optional<std::string_view> bytes;  // text or blob: copied, `word` is where
    if (auto* n = std::get_if<std::int64_t>(&v)) c.word = static_cast<std::uint64_t>(*n);
    if (auto* r = std::get_if<Real>(&v)) c.word = std::bit_cast<std::uint64_t>(r->v);
    if (auto* t = std::get_if<std::string_view>(&v)) bytes = *t;
    if (auto* b = std::get_if<Blob>(&v)) bytes = b->v;
    if (bytes) {
      c.word = bytes_.size();
      c.size = static_cast<std::uint32_t>(bytes->size());
      bytes_.append(*bytes);
    }
    cells_.push_back(c);
  }
  return row;
}

std::span<const Value> RowArena::values(Span row, std::span<Value> out) const {
  for (std::uint32_t i = 0; i < row.count; ++i) {
    const Cell& c = cells_[row.first + i];
    switch (c.kind) {
      case 1:
        out[i] = static_cast<std::int64_t>(c.word);
        break;
      case 2:
        out[i] = std::string_view(bytes_.data() + c.word, c.size);
        break;
      case 3:
        out[i] = Real{std::bit_cast<double>(c.word)};
        break;
      case 4:
        out[i] = Blob{std::string_view(bytes_.data() + c.word, c.size)};
        break;
      default:
        out[i] = std::monostate{};
    }
  }
  return out.first(row.count);
}

std::string columnList(const ChainTable& t, std::string_view prefix,
                       std::initializer_list<std::string_view> omit) {
  std::string out;
  for (auto c : t.columns) {
    if (std::find(omit.begin(), omit.end(), c) != omit.end()) continue;
    out += fmt::format("{}{}{}", out.empty() ? "" : ", ", prefix, c);
  }
  return out;
}

ColumnKind columnKind(std::string_view name) {
  for (const auto& t : kTables) {
    for (std::size_t i = 0; i < t.columns.size(); ++i) {
      if (t.columns[i] == name) return t.kinds[i];
    }
  }
  return ColumnKind::kPlain;
}

}  // namespace sluice::audit::detail
