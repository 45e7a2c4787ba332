// Unit tests of the relay's whole-message path: the header it writes without Beast's
// serializer is byte for byte what the serializer writes, and a whole message takes its own
// body and nothing of the message after it.
#include "relay.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory_resource>
#include <sstream>

#include "field_pool.hpp"

namespace sluice::proxy {
namespace {

TEST(FieldPool, AFreedBlockIsHandedOutAgainForItsSizeClassOnly) {
  FieldPool pool;
  void* a = pool.allocate(40, 8);
  void* b = pool.allocate(100, 8);
  EXPECT_NE(a, b);
  pool.deallocate(a, 40, 8);
  void* c = pool.allocate(200, 8);  // another class: not a's block
  EXPECT_NE(c, a);
  EXPECT_EQ(pool.allocate(64, 8), a);       // a's class (1-64 bytes)
  void* big = pool.allocate(64 * 1024, 8);  // beyond the classes: the heap
  std::memset(big, 0x5a, 64 * 1024);
  pool.deallocate(big, 64 * 1024, 8);
  pool.deallocate(b, 100, 8);
  pool.deallocate(c, 200, 8);
}

TEST(FieldPool, BlocksAreAlignedAndDisjoint) {
  FieldPool pool;
  std::vector<std::pair<unsigned char*, std::size_t>> blocks;
  for (std::size_t i = 0; i < 500; ++i) {
    const std::size_t n = 1 + (i * 37) % 2100;
    auto* p = static_cast<unsigned char*>(pool.allocate(n, alignof(std::max_align_t)));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignof(std::max_align_t), 0u) << n;
    std::memset(p, static_cast<int>(i & 0xff), n);
    blocks.emplace_back(p, n);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const auto [p, n] = blocks[i];
    for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(p[k], static_cast<unsigned char>(i & 0xff));
    pool.deallocate(p, n, alignof(std::max_align_t));
  }
}

TEST(FieldPool, MessagesOfFieldsReuseTheFirstMessagesMemory) {
  FieldPool pool;
  std::size_t after_first = 0;
  for (int message = 0; message < 1000; ++message) {
    PmrFields f{PmrAllocator(&pool)};
    for (int i = 0; i < 20; ++i) f.insert("X-Field-" + std::to_string(i), std::string(i * 10, 'v'));
    f.erase("X-Field-3");
    f.set(http::field::host, "example.test");
    EXPECT_EQ(f["X-Field-19"].size(), 190u);
    if (message == 0) after_first = pool.reserved();
  }
  EXPECT_GT(after_first, 0u);
  EXPECT_EQ(pool.reserved(), after_first);
}

// What Beast's serializer writes for `h` (the relay's general path).
template <bool isRequest>
std::string serialized(const http::header<isRequest, PmrFields>& h) {
  std::ostringstream out;
  out << h;
  return out.str();
}

template <bool isRequest>
std::string formatted(const http::header<isRequest, PmrFields>& h) {
  std::string buf(4096, '\0');
  buf.resize(formatHeader(h, buf.data(), buf.size()));
  return buf;
}

template <bool isRequest>
std::pair<std::unique_ptr<http::parser<isRequest, http::buffer_body, PmrAllocator>>,
          beast::flat_buffer>
parsed(std::pmr::memory_resource* pool, std::string_view wire) {
  auto p = std::make_unique<http::parser<isRequest, http::buffer_body, PmrAllocator>>(
      std::piecewise_construct, std::make_tuple(), std::make_tuple(PmrAllocator(pool)));
  beast::flat_buffer buf;
  buf.commit(net::buffer_copy(buf.prepare(wire.size()), net::buffer(wire.data(), wire.size())));
  ErrorCode ec;
  buf.consume(p->put(buf.data(), ec));
  EXPECT_FALSE(ec);
  EXPECT_TRUE(p->is_header_done());
  return {std::move(p), std::move(buf)};
}

TEST(RelayHeader, RequestIsWhatTheSerializerWrites) {
  std::pmr::unsynchronized_pool_resource pool;
  for (std::string_view wire :
       {"GET /a?b=c HTTP/1.1\r\nHost: x:8080\r\nX-Two: 1\r\nx-two: 2\r\n\r\n",
        "PURGE /odd HTTP/1.0\r\nHost: x\r\n\r\n", "DELETE http://x/ HTTP/1.1\r\n\r\n"}) {
    auto [p, buf] = parsed<true>(&pool, wire);
    p->get().set(http::field::host, "rewritten.test");
    EXPECT_EQ(formatted<true>(p->get()), serialized<true>(p->get())) << wire;
  }
}

TEST(RelayHeader, ResponseIsWhatTheSerializerWritesWithOrWithoutAReason) {
  std::pmr::unsynchronized_pool_resource pool;
  for (std::string_view wire :
       {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 404 \r\nServer: s\r\n\r\n",
        "HTTP/1.0 299 Custom Words\r\nA: b\r\n\r\n"}) {
    auto [p, buf] = parsed<false>(&pool, wire);
    EXPECT_EQ(formatted<false>(p->get()), serialized<false>(p->get())) << wire;
  }
}

TEST(RelayHeader, AHeaderThatDoesNotFitIsLeftToTheSerializer) {
  std::pmr::unsynchronized_pool_resource pool;
  auto [p, buf] = parsed<true>(&pool, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  char out[16];
  EXPECT_EQ(formatHeader(p->get(), out, sizeof out), 0u);
}

TEST(RelayWhole, TakesItsBodyAndLeavesThePipelinedRequestAfterIt) {
  std::pmr::unsynchronized_pool_resource pool;
  auto [p, in] = parsed<true>(
      &pool, "POST /u HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /next HTTP/1.1\r\n");
  auto buf = std::make_unique<char[]>(kRelayBufferBytes);
  ErrorCode ec;
  const std::size_t n = takeWholeMessage(*p, in, buf.get(), ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(std::string(buf.get(), n), "POST /u HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(beast::buffers_to_string(in.data()), "GET /next HTTP/1.1\r\n");
}

TEST(RelayWhole, ABodyNotYetReadOrChunkedStreams) {
  std::pmr::unsynchronized_pool_resource pool;
  auto buf = std::make_unique<char[]>(kRelayBufferBytes);
  ErrorCode ec;
  auto [partial, in1] = parsed<false>(&pool, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhalf");
  EXPECT_EQ(takeWholeMessage(*partial, in1, buf.get(), ec), 0u);
  EXPECT_EQ(beast::buffers_to_string(in1.data()), "half");
  auto [chunked, in2] =
      parsed<false>(&pool, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(takeWholeMessage(*chunked, in2, buf.get(), ec), 0u);
  EXPECT_FALSE(ec);
}

TEST(RelayHead, EndOfStreamBeforeAnyByteIsEndOfStreamAfterSomeIsPartial) {
  std::pmr::unsynchronized_pool_resource pool;
  http::parser<false, http::buffer_body, PmrAllocator> fresh(
      std::piecewise_construct, std::make_tuple(), std::make_tuple(PmrAllocator(&pool)));
  ErrorCode ec = net::error::eof;
  endOfStream(fresh, ec);
  EXPECT_EQ(ec, http::error::end_of_stream);
  http::parser<false, http::buffer_body, PmrAllocator> started(
      std::piecewise_construct, std::make_tuple(), std::make_tuple(PmrAllocator(&pool)));
  beast::flat_buffer buf;
  std::string_view some = "HTTP/1.1 200 OK\r\nA: b\r\n";
  buf.commit(net::buffer_copy(buf.prepare(some.size()), net::buffer(some.data(), some.size())));
  EXPECT_FALSE(headerFrom(started, buf, ec = {}));
  ec = net::error::eof;
  endOfStream(started, ec);
  EXPECT_EQ(ec, http::error::partial_message);
}

}  // namespace
}  // namespace sluice::proxy
