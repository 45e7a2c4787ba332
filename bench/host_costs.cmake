# host_costs: what a page fault, a system call and a wake-up cost on this machine, printed by
# bench/run_all.sh with its table so that tables from different machines can be compared.
add_executable(host_costs ${CMAKE_CURRENT_LIST_DIR}/host_costs.cpp)
