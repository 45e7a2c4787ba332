// RFC 6455 framing (websocket_frames.hpp).
#include "websocket_frames.hpp"

#include <openssl/crypto.h>

#include <algorithm>

namespace sluice::proxy::ws {

std::expected<std::optional<FrameHeader>, std::string> parseHeader(std::string_view data) {
  if (data.size() < 2) return std::nullopt;
  const auto b0 = static_cast<std::uint8_t>(data[0]);
  const auto b1 = static_cast<std::uint8_t>(data[1]);
  FrameHeader h;
  h.fin = (b0 & 0x80) != 0;
  h.rsv = b0 & 0x70;
  h.opcode = b0 & 0x0F;
  h.masked = (b1 & 0x80) != 0;
  if ((h.opcode > kBinary && h.opcode < kClose) || h.opcode > kPong)
    return std::unexpected("reserved opcode " + std::to_string(h.opcode));
  std::size_t at = 2;
  const std::uint8_t len7 = b1 & 0x7F;
  const std::size_t ext = len7 == 126 ? 2 : len7 == 127 ? 8 : 0;
  if (data.size() < at + ext + (h.masked ? 4 : 0)) return std::nullopt;
  if (ext == 0) h.length = len7;
  for (std::size_t i = 0; i < ext; ++i)
    h.length = (h.length << 8) | static_cast<std::uint8_t>(data[at + i]);
  at += ext;
  if (ext == 8 && (h.length >> 63) != 0)
    return std::unexpected(std::string("payload length with its most significant bit set"));
  if (h.control() && (!h.fin || h.length > 125))
    return std::unexpected(std::string("control frame fragmented or over 125 bytes"));
  if (h.masked) {
    for (std::size_t i = 0; i < 4; ++i) h.mask[i] = static_cast<std::uint8_t>(data[at + i]);
    at += 4;
  }
  h.header_size = at;
  return h;
}

std::string encodeHeader(const FrameHeader& h) {
  std::string out;
  out.push_back(static_cast<char>((h.fin ? 0x80 : 0) | (h.rsv & 0x70) | (h.opcode & 0x0F)));
  const std::uint8_t mask_bit = h.masked ? 0x80 : 0;
  if (h.length < 126) {
    out.push_back(static_cast<char>(mask_bit | h.length));
  } else if (h.length <= 0xFFFF) {
    out.push_back(static_cast<char>(mask_bit | 126));
    for (int shift = 8; shift >= 0; shift -= 8)
      out.push_back(static_cast<char>((h.length >> shift) & 0xFF));
  } else {
    out.push_back(static_cast<char>(mask_bit | 127));
    for (int shift = 56; shift >= 0; shift -= 8)
      out.push_back(static_cast<char>((h.length >> shift) & 0xFF));
  }
  if (h.masked)
    for (auto m : h.mask) out.push_back(static_cast<char>(m));
  return out;
}

void applyMask(char* data, std::size_t n, const std::array<std::uint8_t, 4>& mask,
               std::uint64_t offset) {
  for (std::size_t i = 0; i < n; ++i)
    data[i] = static_cast<char>(static_cast<std::uint8_t>(data[i]) ^ mask[(offset + i) % 4]);
}

std::string makeFrame(std::uint8_t opcode, std::string_view payload, bool masked,
                      std::array<std::uint8_t, 4> mask) {
  FrameHeader h;
  h.opcode = opcode;
  h.masked = masked;
  h.mask = mask;
  h.length = payload.size();
  std::string out = encodeHeader(h);
  const std::size_t at = out.size();
  out.append(payload);
  if (masked) applyMask(out.data() + at, payload.size(), mask, 0);
  return out;
}

std::string closePayload(std::uint16_t code, std::string_view reason) {
  std::string out;
  out.push_back(static_cast<char>(code >> 8));
  out.push_back(static_cast<char>(code & 0xFF));
  out.append(reason.substr(0, 123));
  return out;
}

FrameRelay::FrameRelay(TextHook hook, std::size_t max_message)
    : hook_(std::move(hook)), max_message_(max_message) {}

std::optional<CloseWith> FrameRelay::feed(std::string& in, std::string& out) {
  for (;;) {
    if (passthrough_left_ > 0) {
      const auto take =
          static_cast<std::size_t>(std::min<std::uint64_t>(passthrough_left_, in.size()));
      out.append(in, 0, take);
      in.erase(0, take);
      passthrough_left_ -= take;
      if (passthrough_left_ > 0) return std::nullopt;
    }
    auto parsed = parseHeader(in);
    if (!parsed) return CloseWith{1002, parsed.error()};
    if (!*parsed) return std::nullopt;
    const FrameHeader& h = **parsed;
    // Binary frames, control frames and continuations of binary messages pass verbatim.
    const bool text = h.opcode == kText || (h.opcode == kContinuation && in_text_);
    if (!hook_ || !text) {
      out.append(in, 0, h.header_size);
      in.erase(0, h.header_size);
      passthrough_left_ = h.length;
      continue;
    }
    bool need_more = false;
    if (auto closing = takeText(h, in, out, need_more)) return closing;
    if (need_more) return std::nullopt;
  }
}

// One frame of a text message: added to the message; the whole message, once its last frame
// is in, goes through the hook and out as one frame.
std::optional<CloseWith> FrameRelay::takeText(const FrameHeader& h, std::string& in,
                                              std::string& out, bool& need_more) {
  if (h.opcode == kText && in_text_)
    return CloseWith{1002, "a text message began inside a fragmented one"};
  // Compressed (permessage-deflate) or otherwise extended frames cannot be read.
  if (h.rsv != 0) return CloseWith{1008, "extension (RSV) frames cannot be inspected"};
  if (message_.size() + h.length > max_message_)
    return CloseWith{1009, "text message over " + std::to_string(max_message_) + " bytes"};
  if (in.size() < h.header_size + h.length) {
    need_more = true;
    return std::nullopt;
  }
  const std::size_t at = message_.size();
  message_.append(in, h.header_size, static_cast<std::size_t>(h.length));
  if (h.masked) applyMask(message_.data() + at, static_cast<std::size_t>(h.length), h.mask, 0);
  in.erase(0, h.header_size + static_cast<std::size_t>(h.length));
  if (h.opcode == kText) {
    first_ = h;
    in_text_ = true;
  }
  if (!h.fin) return std::nullopt;
  in_text_ = false;
  const TextVerdict verdict = hook_(message_);
  std::optional<CloseWith> closing;
  if (verdict == TextVerdict::kRefuse) {
    closing = CloseWith{1008, "placeholder_leak"};
  } else {
    FrameHeader f;
    f.opcode = kText;
    f.masked = first_.masked;
    f.mask = first_.mask;
    f.length = message_.size();
    out += encodeHeader(f);
    const std::size_t start = out.size();
    out += message_;
    if (f.masked) applyMask(out.data() + start, message_.size(), f.mask, 0);
  }
  // The message may hold a swapped secret: wiped, not just dropped.
  OPENSSL_cleanse(message_.data(), message_.size());
  message_.clear();
  return closing;
}

}  // namespace sluice::proxy::ws
