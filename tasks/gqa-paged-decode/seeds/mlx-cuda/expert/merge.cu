kspaged::merge<T, D, Hq, CH>(part, kv_indptr, o, lse, B[0]);
