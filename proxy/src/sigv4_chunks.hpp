// Streaming uploads signed chunk by chunk (x-amz-content-sha256:
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD, Content-Encoding: aws-chunked): each chunk is
// `hex-size;chunk-signature=<64 hex>\r\n<data>\r\n`, its signature chained from the previous
// one (the first from the header signature), the last chunk of size 0. ChunkResigner checks
// every chunk against the placeholder chain and writes it out with the real chain's signature
// (the same length: Content-Length and x-amz-decoded-content-length stay right).
//
// Memory: one chunk's data is held until its end (the new signature, written before the data,
// covers the data's hash); SDKs send 8 to 128 KiB chunks; a chunk over kMaxChunkBytes is
// refused. An upload of any length costs no more than that.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "sigv4.hpp"
#include "sluice/base/digest.hpp"

namespace sluice::proxy::sigv4 {

class ChunkResigner {
 public:
  static constexpr std::size_t kMaxChunkBytes = 8 << 20;

  ChunkResigner(ChunkChain placeholder, ChunkChain real);

  /// Takes the next body bytes (any split) and appends what to forward to `out`. False once
  /// the stream is refused (a chunk signature that does not verify, broken framing, bytes after
  /// the last chunk): nothing more may be forwarded, and the upload must not be completed.
  bool feed(std::string_view in, std::string& out);
  /// The last (zero-size) chunk has been checked and written.
  bool done() const { return state_ == State::kDone; }
  /// Why the stream was refused (empty while it is not).
  const std::string& error() const { return error_; }

 private:
  enum class State { kHeader, kData, kDataEnd, kDone, kFailed };

  bool headerByte(char c);
  bool finishChunk(std::string& out);
  bool fail(std::string why);

  ChunkChain placeholder_;
  ChunkChain real_;
  State state_ = State::kHeader;
  std::string line_;       // the chunk header line so far
  std::string size_text_;  // the hex size as sent (kept: the length must not change)
  std::string signature_;  // as sent
  std::size_t size_ = 0;
  std::string data_;  // this chunk's data (at most kMaxChunkBytes)
  std::string end_;   // the CRLF after the data (and after the last chunk's header)
  base::Sha256 hash_;
  std::string error_;
};

}  // namespace sluice::proxy::sigv4
