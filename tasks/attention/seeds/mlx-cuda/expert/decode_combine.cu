// attention, expert: decode (Tq == 1), pass 2 of 2: block b * Hq + h (128 threads) merges that head's
// (Tk + CH - 1) / CH partials into o. Device code in decode.cuh. Template: D, CH and the dim Tk.
ksdec::decode_combine<T, D, 128, (Tk + CH - 1) / CH>(part, o);
