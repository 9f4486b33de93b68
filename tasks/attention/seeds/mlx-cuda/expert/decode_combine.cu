// attention, expert: decode (Tq == 1), pass 2 of 2. One block of 256 threads per (b, h) merges the
// (Tk + CH - 1) / CH partials of pass 1 into o. The device code is in attn.cuh. Template: D, CH and the dim Tk.
ksattn::decode_combine<T, D, 256>(mpart, lpart, apart, o, (Tk + CH - 1) / CH);
