// aws-chunked streaming uploads re-signed chunk by chunk (sigv4_chunks.hpp).
#include "sigv4_chunks.hpp"

#include <openssl/crypto.h>

namespace sluice::proxy::sigv4 {
namespace {

constexpr std::size_t kMaxHeaderLine = 256;
constexpr std::string_view kSigKey = ";chunk-signature=";

}  // namespace

ChunkResigner::ChunkResigner(ChunkChain placeholder, ChunkChain real)
    : placeholder_(std::move(placeholder)), real_(std::move(real)) {}

bool ChunkResigner::fail(std::string why) {
  state_ = State::kFailed;
  error_ = std::move(why);
  OPENSSL_cleanse(data_.data(), data_.size());
  data_.clear();
  return false;
}

// One byte of `hex-size;chunk-signature=<sig>\r\n`.
bool ChunkResigner::headerByte(char c) {
  line_ += c;
  if (line_.size() > kMaxHeaderLine) return fail("aws-chunked chunk header too long");
  if (!line_.ends_with("\r\n")) return true;
  std::string_view l(line_);
  l.remove_suffix(2);
  auto semi = l.find(kSigKey);
  if (semi == 0 || semi == std::string_view::npos || l.size() - semi - kSigKey.size() != 64)
    return fail("aws-chunked chunk header without a chunk-signature");
  size_text_ = std::string(l.substr(0, semi));
  signature_ = std::string(l.substr(semi + kSigKey.size()));
  size_ = 0;
  for (char h : size_text_) {
    int v = (h >= '0' && h <= '9')   ? h - '0'
            : (h >= 'a' && h <= 'f') ? h - 'a' + 10
            : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                     : -1;
    if (v < 0 || size_text_.size() > 8) return fail("aws-chunked chunk size is not hex");
    size_ = size_ * 16 + static_cast<std::size_t>(v);
  }
  if (size_ > kMaxChunkBytes)
    return fail("aws-chunked chunk of " + std::to_string(size_) + " bytes (at most " +
                std::to_string(kMaxChunkBytes) + ")");
  line_.clear();
  data_.clear();
  end_.clear();
  state_ = size_ ? State::kData : State::kDataEnd;
  return true;
}

// The chunk is complete: check the client's signature, write it with the real one.
bool ChunkResigner::finishChunk(std::string& out) {
  const std::string data_hash = hash_.finishHex();
  const std::string expected = chunkSignature(placeholder_, data_hash);
  if (CRYPTO_memcmp(expected.data(), signature_.data(), expected.size()) != 0)
    return fail("aws-chunked chunk signature was not made with the sandbox's placeholder key");
  placeholder_.previous = signature_;
  real_.previous = chunkSignature(real_, data_hash);
  out += size_text_;
  out += kSigKey;
  out += real_.previous;
  out += "\r\n";
  out += data_;
  out += "\r\n";
  OPENSSL_cleanse(data_.data(), data_.size());
  data_.clear();
  state_ = size_ ? State::kHeader : State::kDone;
  return true;
}

bool ChunkResigner::feed(std::string_view in, std::string& out) {
  while (!in.empty()) {
    switch (state_) {
      case State::kFailed:
        return false;
      case State::kDone:
        return fail("bytes after the last aws-chunked chunk");
      case State::kHeader:
        if (!headerByte(in.front())) return false;
        in.remove_prefix(1);
        break;
      case State::kData: {
        std::string_view part = in.substr(0, size_ - data_.size());
        data_.append(part);
        hash_.update(part);
        in.remove_prefix(part.size());
        if (data_.size() == size_) state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd:
        end_ += in.front();
        in.remove_prefix(1);
        if (end_.size() == 2) {
          if (end_ != "\r\n") return fail("aws-chunked chunk data not followed by CRLF");
          if (!finishChunk(out)) return false;
        }
        break;
    }
  }
  return state_ != State::kFailed;
}

}  // namespace sluice::proxy::sigv4
