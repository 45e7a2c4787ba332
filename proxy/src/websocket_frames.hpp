// RFC 6455 framing for the inspected WebSocket relay: parsing a frame header, writing one,
// (un)masking, and the message assembler the relay uses to see whole text messages. Frames it
// does not need to change pass through byte for byte.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::proxy::ws {

enum Opcode : std::uint8_t {
  kContinuation = 0x0,
  kText = 0x1,
  kBinary = 0x2,
  kClose = 0x8,
  kPing = 0x9,
  kPong = 0xA,
};

struct FrameHeader {
  bool fin = true;
  std::uint8_t rsv = 0;  // the three RSV bits, in place (0x70 of the first byte)
  std::uint8_t opcode = kText;
  bool masked = false;
  std::array<std::uint8_t, 4> mask{};
  std::uint64_t length = 0;     // payload bytes
  std::size_t header_size = 0;  // bytes of the header as parsed

  bool control() const { return (opcode & 0x8) != 0; }
};

/// The header at the start of `data`: nullopt when more bytes are needed; an error for what
/// RFC 6455 5.2/5.5 forbids (a reserved opcode, a 64-bit length with its top bit set, a
/// control frame that is fragmented or longer than 125 bytes).
std::expected<std::optional<FrameHeader>, std::string> parseHeader(std::string_view data);

/// The wire form of `h` (its length and mask as given; the shortest length encoding).
std::string encodeHeader(const FrameHeader& h);

/// XORs `n` bytes with `mask`, the first byte being payload byte number `offset`.
void applyMask(char* data, std::size_t n, const std::array<std::uint8_t, 4>& mask,
               std::uint64_t offset);

/// A frame with the given payload (masked with `mask` when `masked`): FIN, opcode, no RSV.
std::string makeFrame(std::uint8_t opcode, std::string_view payload, bool masked,
                      std::array<std::uint8_t, 4> mask = {});

/// A close frame's payload: the status code (big-endian) and a reason.
std::string closePayload(std::uint16_t code, std::string_view reason);

/// How the relay of one direction ends a WebSocket: the close frame's code and reason.
struct CloseWith {
  std::uint16_t code;
  std::string reason;
};

/// What a text-message hook decides.
enum class TextVerdict { kPass, kRefuse };

/// One direction of an inspected WebSocket, as a state machine over the byte stream: frames
/// pass through verbatim (binary, control, and text when there is no hook) except text
/// messages, which are assembled (continuation frames included, unmasked, at most
/// `max_message` bytes), given to the hook (which may rewrite them in place), and forwarded
/// as one frame — FIN, opcode text, the first frame's mask — which RFC 6455 5.4 allows an
/// intermediary when no extension is in use. Control frames between fragments pass at once.
class FrameRelay {
 public:
  using TextHook = std::function<TextVerdict(std::string& message)>;
  FrameRelay(TextHook hook, std::size_t max_message);

  /// Consumes what it can of `in` (erasing it) and appends the bytes to forward to `out`.
  /// nullopt: go on (feed more when it arrives); else the WebSocket must end so.
  std::optional<CloseWith> feed(std::string& in, std::string& out);

 private:
  std::optional<CloseWith> takeText(const FrameHeader& h, std::string& in, std::string& out,
                                    bool& need_more);

  TextHook hook_;
  std::size_t max_message_;
  std::uint64_t passthrough_left_ = 0;  // payload bytes of a verbatim frame still to forward
  bool in_text_ = false;                // inside a fragmented text message
  FrameHeader first_;                   // that message's first frame (its mask)
  std::string message_;                 // that message so far, unmasked
};

}  // namespace sluice::proxy::ws
