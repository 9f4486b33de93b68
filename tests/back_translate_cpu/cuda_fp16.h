// Empty: the CPU emulation in cuda_cpu.h defines the half types the prelude needs.
