# http_relay: the bare single-threaded plain-HTTP relay bench/proxy_vs_squid.sh measures as the
# floor of its keep-alive row (one epoll loop, bytes copied as they come, no parsing, policy or
# audit; not a proxy to use).
add_executable(http_relay ${CMAKE_CURRENT_LIST_DIR}/http_relay.cpp)
