// Stands in for the tessel binary in cpu_guard_test.sh: all the work is done by cpu_guard.cpp before main.
int main() { return 0; }
