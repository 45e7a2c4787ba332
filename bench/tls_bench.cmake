# tls_bench: the inspection CA's cost per leaf — a fresh mint (cache miss) and a cache hit
# (Google Benchmark).
add_executable(tls_bench ${CMAKE_CURRENT_LIST_DIR}/tls_bench.cpp)
target_link_libraries(tls_bench PRIVATE sluice::proxy benchmark::benchmark)

# tls_load: the HTTPS-through-a-proxy load client of bench/tls_vs_passthrough.sh (not a
# Google Benchmark program); its h2 mode uses nghttp2's client session.
add_executable(tls_load ${CMAKE_CURRENT_LIST_DIR}/tls_load.cpp)
pkg_check_modules(TLS_LOAD_NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2)
target_link_libraries(tls_load PRIVATE OpenSSL::SSL OpenSSL::Crypto Threads::Threads
                      PkgConfig::TLS_LOAD_NGHTTP2)
