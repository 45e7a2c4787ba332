// A session's exec request (see exec_request.hpp).
#include "exec_request.hpp"

#include <cstring>

namespace sluice::runner::detail {
namespace {

constexpr std::uint64_t kBlobMagic = 0x424f4c4243455845;  // "EXECBLOB"
constexpr std::uint64_t kMaxStrings = 1u << 20;

// The blob: this header, then (argc + 1 + envc + 1) pointer slots, then the strings cwd,
// argv..., env..., each NUL-terminated.
struct BlobHeader {
  std::uint64_t magic;
  std::uint64_t argc;
  std::uint64_t envc;
  std::uint64_t table_offset;    // sizeof(BlobHeader)
  std::uint64_t strings_offset;  // table_offset + 8 * (argc + envc + 2)
};

}  // namespace

std::string encodeExecBlob(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, const std::string& cwd) {
  BlobHeader h{kBlobMagic, argv.size(), env.size(), sizeof(BlobHeader), 0};
  h.strings_offset = h.table_offset + sizeof(char*) * (argv.size() + env.size() + 2);
  std::string out(h.strings_offset, '\0');
  std::memcpy(out.data(), &h, sizeof h);
  for (const std::string* s : {&cwd}) out.append(s->c_str(), s->size() + 1);
  for (const std::string& s : argv) out.append(s.c_str(), s.size() + 1);
  for (const std::string& s : env) out.append(s.c_str(), s.size() + 1);
  return out;
}

bool decodeExecBlob(char* mem, std::size_t size, ExecArgs& out) {
  if (mem == nullptr || size < sizeof(BlobHeader)) return false;
  BlobHeader h;
  std::memcpy(&h, mem, sizeof h);
  if (h.magic != kBlobMagic || h.argc == 0 || h.argc > kMaxStrings || h.envc > kMaxStrings ||
      h.table_offset != sizeof(BlobHeader) ||
      h.strings_offset != h.table_offset + sizeof(char*) * (h.argc + h.envc + 2) ||
      h.strings_offset > size)
    return false;
  char** table = reinterpret_cast<char**>(mem + h.table_offset);
  char* p = mem + h.strings_offset;
  char* const end = mem + size;
  // cwd, then argv, then env: each must end inside the blob.
  auto next = [&]() -> char* {
    char* nul = static_cast<char*>(std::memchr(p, '\0', static_cast<std::size_t>(end - p)));
    if (nul == nullptr) return nullptr;
    char* s = p;
    p = nul + 1;
    return s;
  };
  const char* cwd = p < end ? next() : nullptr;
  if (cwd == nullptr) return false;
  for (std::uint64_t i = 0; i < h.argc + h.envc; ++i) {
    char* s = p < end ? next() : nullptr;
    if (s == nullptr) return false;
    table[i < h.argc ? i : i + 1] = s;
  }
  if (p != end) return false;
  table[h.argc] = nullptr;
  table[h.argc + 1 + h.envc] = nullptr;
  out.argv = table;
  out.envp = table + h.argc + 1;
  out.cwd = cwd;
  return true;
}

}  // namespace sluice::runner::detail
