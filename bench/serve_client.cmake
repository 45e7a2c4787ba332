# serve_client: the C++ client of bench/serve_latency.sh (latency of `sluice serve` calls over
# its Unix socket, keep-alive; not a Google Benchmark program).
add_executable(serve_client ${CMAKE_CURRENT_LIST_DIR}/serve_client.cpp)
target_link_libraries(serve_client PRIVATE Threads::Threads)
