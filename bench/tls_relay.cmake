# tls_relay: the bare TLS-terminating relay bench/tls_vs_passthrough.sh measures as the floor of
# its kept-alive row (decrypt and re-encrypt only: no policy, parsing or audit; not a proxy to use).
add_executable(tls_relay ${CMAKE_CURRENT_LIST_DIR}/tls_relay.cpp)
target_link_libraries(tls_relay PRIVATE OpenSSL::SSL OpenSSL::Crypto)
