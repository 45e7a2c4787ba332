# replay_bench: `policy replay` rows/s and `policy learn` time over a 1,000,000-row audit store
# written through the Store API (a mix of tunnels, origin connections, requests and DNS rows).
# Run: build/bench/replay_bench (SLUICE_REPLAY_ROWS=N for a smaller store; SLUICE_BENCH_DIR
# picks the directory for the database, default /var/tmp).
add_executable(replay_bench ${CMAKE_CURRENT_LIST_DIR}/replay_bench.cpp)
target_link_libraries(replay_bench PRIVATE sluice::replay sluice::audit benchmark::benchmark
                      Threads::Threads)
