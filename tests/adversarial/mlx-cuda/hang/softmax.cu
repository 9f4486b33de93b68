// Cheat: spins forever.
volatile int spin = 1;
while (spin) { }
