# audit_bench: sustained connection events/s into a WAL database on disk, and the cost of one
# durable execution receipt, signing off and on; inclusion proofs on a 1,000,000-row store;
# the raw SQLite ceiling (the same rows inserted with one prepared statement, same disk).
# Run: build/bench/audit_bench [--benchmark_min_time=2]
# (SLUICE_BENCH_DIR picks the directory for the database; default /var/tmp).
add_executable(audit_bench ${CMAKE_CURRENT_SOURCE_DIR}/audit_bench.cpp)
target_link_libraries(audit_bench PRIVATE sluice::audit benchmark::benchmark Threads::Threads
                      nlohmann_json::nlohmann_json SQLite::SQLite3)
