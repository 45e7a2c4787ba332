// RFC 6455 framing and the frame relay state machine (proxy/src/websocket_frames.hpp), as
// units; websocket_test.cpp drives them with real clients through the proxy.
#include "websocket_frames.hpp"

#include <gtest/gtest.h>

namespace sluice::proxy::ws {
namespace {

constexpr std::array<std::uint8_t, 4> kMask = {0x37, 0xfa, 0x21, 0x3d};

FrameHeader header(std::string_view wire) {
  auto h = parseHeader(wire);
  EXPECT_TRUE(h && *h) << (h ? "incomplete" : h.error());
  return h && *h ? **h : FrameHeader{};
}

TEST(WebSocketFrames, ParsesTheRfcExamples) {
  // RFC 6455 5.7: a single-frame unmasked "Hello" and a masked one.
  const std::string unmasked("\x81\x05Hello", 7);
  auto h = header(unmasked);
  EXPECT_TRUE(h.fin);
  EXPECT_EQ(h.opcode, kText);
  EXPECT_FALSE(h.masked);
  EXPECT_EQ(h.length, 5u);
  EXPECT_EQ(h.header_size, 2u);
  const std::string masked("\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58", 11);
  h = header(masked);
  EXPECT_TRUE(h.masked);
  EXPECT_EQ(h.mask, kMask);
  EXPECT_EQ(h.header_size, 6u);
  std::string payload = masked.substr(6);
  applyMask(payload.data(), payload.size(), h.mask, 0);
  EXPECT_EQ(payload, "Hello");
  EXPECT_EQ(makeFrame(kText, "Hello", true, kMask), masked);
  EXPECT_EQ(makeFrame(kText, "Hello", false), unmasked);
}

TEST(WebSocketFrames, LengthsOf16And64BitsRoundTrip) {
  for (std::uint64_t len : {125ull, 126ull, 65535ull, 65536ull, 5ull << 32}) {
    FrameHeader h;
    h.opcode = kBinary;
    h.fin = false;
    h.length = len;
    h.masked = true;
    h.mask = kMask;
    const std::string wire = encodeHeader(h);
    EXPECT_EQ(wire.size(), 2u + (len < 126 ? 0 : len <= 0xFFFF ? 2 : 8) + 4) << len;
    auto back = header(wire);
    EXPECT_EQ(back.length, len);
    EXPECT_FALSE(back.fin);
    EXPECT_EQ(back.opcode, kBinary);
    EXPECT_EQ(back.mask, kMask);
    // Every shorter prefix asks for more bytes.
    for (std::size_t n = 0; n < wire.size(); ++n) {
      auto partial = parseHeader(std::string_view(wire).substr(0, n));
      ASSERT_TRUE(partial);
      EXPECT_FALSE(*partial) << len << " with " << n << " bytes";
    }
  }
}

TEST(WebSocketFrames, RefusesWhatTheRfcForbids) {
  EXPECT_FALSE(parseHeader(std::string("\x83\x00", 2)));          // reserved opcode 3
  EXPECT_FALSE(parseHeader(std::string("\x09\x00", 2)));          // fragmented ping
  EXPECT_FALSE(parseHeader(std::string("\x89\x7e\x00\x80", 4)));  // ping over 125 bytes
  EXPECT_FALSE(parseHeader(std::string("\x82\x7f\x80\x00\x00\x00\x00\x00\x00\x00", 10)));
}

// Feeds `wire` to `relay` one byte at a time (every split point), collecting what it forwards.
std::string feedBytewise(FrameRelay& relay, const std::string& wire,
                         std::optional<CloseWith>* closing = nullptr) {
  std::string in, out;
  for (char c : wire) {
    in.push_back(c);
    auto r = relay.feed(in, out);
    if (r) {
      if (closing) *closing = r;
      break;
    }
  }
  return out;
}

TEST(WebSocketFrames, RelayPassesFramesItNeedNotTouchVerbatim) {
  FrameRelay relay(
      [](std::string& m) {
        m = "changed";
        return TextVerdict::kPass;
      },
      1024);
  const std::string wire = makeFrame(kBinary, std::string(300, 'b'), true, kMask) +
                           makeFrame(kPing, "p", true, kMask) +
                           makeFrame(kClose, closePayload(1000, "bye"), true, kMask);
  EXPECT_EQ(feedBytewise(relay, wire), wire);
  FrameRelay no_hook(nullptr, 1024);
  const std::string text = makeFrame(kText, "hello", true, kMask);
  EXPECT_EQ(feedBytewise(no_hook, text), text);
}

TEST(WebSocketFrames, RelayAssemblesAFragmentedTextMessageAroundAPing) {
  std::string seen;
  FrameRelay relay(
      [&](std::string& m) {
        seen = m;
        m.replace(m.find("TOKEN"), 5, "a-longer-secret");
        return TextVerdict::kPass;
      },
      1024);
  FrameHeader first;
  first.fin = false;
  first.opcode = kText;
  first.masked = true;
  first.mask = kMask;
  auto fragment = [&](FrameHeader h, std::string payload) {
    h.length = payload.size();
    applyMask(payload.data(), payload.size(), h.mask, 0);
    return encodeHeader(h) + payload;
  };
  FrameHeader middle = first, last = first;
  middle.opcode = last.opcode = kContinuation;
  middle.mask = {1, 2, 3, 4};
  last.fin = true;
  const std::string ping = makeFrame(kPing, "", true, kMask);
  const std::string wire =
      fragment(first, "key=TO") + ping + fragment(middle, "K") + fragment(last, "EN;end");
  const std::string out = feedBytewise(relay, wire);
  EXPECT_EQ(seen, "key=TOKEN;end");
  EXPECT_EQ(out, ping + makeFrame(kText, "key=a-longer-secret;end", true, kMask))
      << "the ping first, then the message as one frame masked with its first frame's mask";
}

TEST(WebSocketFrames, RelayClosesOnARefusalAnOversizedOrCompressedMessage) {
  FrameRelay refuse([](std::string&) { return TextVerdict::kRefuse; }, 1024);
  std::optional<CloseWith> closing;
  EXPECT_EQ(feedBytewise(refuse, makeFrame(kText, "x", true, kMask), &closing), "");
  ASSERT_TRUE(closing);
  EXPECT_EQ(closing->code, 1008);
  EXPECT_EQ(closing->reason, "placeholder_leak");
  FrameRelay small([](std::string&) { return TextVerdict::kPass; }, 4);
  closing.reset();
  feedBytewise(small, makeFrame(kText, "12345", false), &closing);
  ASSERT_TRUE(closing);
  EXPECT_EQ(closing->code, 1009);
  FrameRelay any([](std::string&) { return TextVerdict::kPass; }, 1024);
  std::string compressed = makeFrame(kText, "zz", false);
  compressed[0] = static_cast<char>(compressed[0] | 0x40);  // RSV1: permessage-deflate
  closing.reset();
  feedBytewise(any, compressed, &closing);
  ASSERT_TRUE(closing);
  EXPECT_EQ(closing->code, 1008);
  EXPECT_EQ(closePayload(1008, "why"), std::string("\x03\xf0why", 5));
}

}  // namespace
}  // namespace sluice::proxy::ws
