// softplus(x) = log(1 + exp(x)) in float, accurate also where exp(x) is tiny (MSL has no log1p):
// log1p(e) = e * log(1 + e) / ((1 + e) - 1) (Goldberg), and x itself above 20.
inline float softplus_f(float x) {
  if (x > 20.0f) {
    return x;
  }
  const float e = metal::exp(x);
  const float e1 = 1.0f + e;
  return e1 == 1.0f ? e : e * (metal::log(e1) / (e1 - 1.0f));
}
