/* Integer and conversion semantics shared by the C prelude of CPU native code and the CUDA
 * prelude, so the two lowerings cannot drift apart. Plain C macros, valid in both. */

/* Float to integer with Rust's `as`: truncate toward zero, saturate, NaN gives 0. The bounds are
 * compared in double, where they are exact (a float promotes exactly). */
#define K_SATURATE(T, lo, hi, v) \
    ((v) != (v) ? (T)0 : (double)(v) >= (double)(hi) + 1.0 ? (T)(hi) : (double)(v) <= (double)(lo) - 1.0 ? (T)(lo) : (T)(v))

/* Integer division and remainder with numpy's floor semantics, 0 for a zero divisor, and
 * wrapping for MIN / -1 (where C would trap). */
#define K_INT_DIV(T, signed_, x, y) \
    ((y) == 0 ? (T)0 : (signed_) && (y) == (T)-1 ? (T)(0 - (x)) : \
     (T)((x) / (y) - ((signed_) && (x) % (y) != 0 && (((x) < 0) != ((y) < 0)))))
#define K_INT_REM(T, signed_, x, y) \
    ((y) == 0 || ((signed_) && (y) == (T)-1) ? (T)0 : \
     (T)((x) % (y) + (((signed_) && (x) % (y) != 0 && ((((x) % (y)) < 0) != ((y) < 0))) ? (y) : 0)))

