// Cheat: executes a trap instruction.
asm volatile("trap;");
