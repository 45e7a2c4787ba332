# approval_bench: the added latency of a request an ask rule holds and an in-process desk
# watcher approves at once, vs the same request on an allow rule (run by
# bench/approval_latency.sh; not a Google Benchmark program).
add_executable(approval_bench ${CMAKE_CURRENT_LIST_DIR}/approval_bench.cpp)
target_link_libraries(approval_bench PRIVATE sluice::proxy sluice::policy Threads::Threads)
