# splice_relay: the bare CONNECT relay bench/proxy_vs_squid.sh measures as the floor of its
# bulk-download row (blocking splice(2), no policy or audit; not a proxy to use).
add_executable(splice_relay ${CMAKE_CURRENT_LIST_DIR}/splice_relay.cpp)
target_link_libraries(splice_relay PRIVATE Threads::Threads)
