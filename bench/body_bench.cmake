# body_bench: the whole-body stage's costs (placeholder search and swap per MiB, HMAC per
# request) and the WebSocket text relay per MiB (Google Benchmark). Uses the proxy's private
# headers.
add_executable(body_bench ${CMAKE_CURRENT_LIST_DIR}/body_bench.cpp)
target_include_directories(body_bench PRIVATE ${PROJECT_SOURCE_DIR}/proxy/src)
target_link_libraries(body_bench PRIVATE sluice::proxy benchmark::benchmark)
