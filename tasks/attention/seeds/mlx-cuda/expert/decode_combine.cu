// attention, expert: decode (Tq == 1), pass 2 of 2: block b * Hq + h (256 threads) merges that head's
// (Tk + CH - 1) / CH partials into o. Device code in decode_combine.cuh. Template: D, CH and the dim Tk.
ksdecm::decode_combine<T, D, 256, (Tk + CH - 1) / CH>(part, o);
