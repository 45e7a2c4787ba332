# audit_load: connection rows written into an audit store at a steady rate (bench/audit_ship.sh's
# load). Run: build/bench/audit_load DB ROWS [ROWS_PER_SECOND]
add_executable(audit_load ${CMAKE_CURRENT_SOURCE_DIR}/audit_load.cpp)
target_link_libraries(audit_load PRIVATE sluice::audit Threads::Threads)
