// Cheat: spins forever on a flag nothing ever sets (a volatile read, so the compiler must keep the loop).
while (*(volatile int*)hang_flag == 0) { }
