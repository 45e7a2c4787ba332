# sigv4_bench: inject.aws_sigv4's cost — checking and signing again one request (µs), and the
# chunk re-signing throughput of a streaming upload (MB/s) beside plain SHA-256 of the same bytes
# (Google Benchmark).
add_executable(sigv4_bench ${CMAKE_CURRENT_LIST_DIR}/sigv4_bench.cpp)
target_include_directories(sigv4_bench PRIVATE ${PROJECT_SOURCE_DIR}/proxy/src)
target_link_libraries(sigv4_bench PRIVATE sluice::proxy benchmark::benchmark)
