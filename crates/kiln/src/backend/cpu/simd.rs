//! Loops that the compiler vectorises, built twice: for the baseline ISA and, on x86-64, with
//! AVX2+FMA enabled, chosen at run time. Release builds target the baseline ISA, so without this
//! dispatch hot loops would use 128-bit SSE2 only. Op bodies are passed as closures and inlined
//! into the feature-enabled copy.
//!
//! `KILN_NATIVE_ARCH` set to a lower x86-64 level than the CPU's caps this dispatch too
//! (`x86-64-v2`: the baseline copies, `x86-64-v3`: AVX2 at most), so that one machine runs, tests
//! and measures the eager kernels as a CPU of that level would, along with its native code.

use std::sync::OnceLock;

/// The widest copies `KILN_NATIVE_ARCH` allows: 1 baseline, 2 AVX2, 3 AVX-512 (also when unset,
/// `native` or another architecture's level).
#[cfg(target_arch = "x86_64")]
fn level_cap() -> u8 {
    match std::env::var("KILN_NATIVE_ARCH").as_deref().map(str::trim) {
        Ok("x86-64-v2") => 1,
        Ok("x86-64-v3") => 2,
        _ => 3,
    }
}

/// Whether this CPU has AVX2 and FMA, and `KILN_NATIVE_ARCH` allows them (checked once).
pub fn has_avx2_fma() -> bool {
    static FLAG: OnceLock<bool> = OnceLock::new();
    *FLAG.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            level_cap() >= 2 && is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Whether this CPU has AVX-512 (F, VL, DQ) besides AVX2 and FMA, and `KILN_NATIVE_ARCH` allows
/// it (checked once): the float transcendentals, which are compute-bound, get a 16-lane copy
/// (twice the lanes per instruction, and 32 registers, so the polynomial constants stay in
/// registers).
pub fn has_avx512() -> bool {
    static FLAG: OnceLock<bool> = OnceLock::new();
    *FLAG.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            has_avx2_fma()
                && level_cap() >= 3
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512dq")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Runs `f` from a copy built for the widest vector ISA this CPU has (AVX-512, AVX2+FMA, or the
/// baseline), so the loops `f` inlines vectorise for it: for kernels whose loops are plain Rust
/// spread over several functions (mark them and the closure `#[inline(always)]`), such as the quantized
/// products' decoding and dot products. Rust never contracts a multiply and an add, so every
/// copy rounds alike.
#[inline(always)]
pub fn with_widest_isa<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
        unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        // Safety: the features were detected on this CPU.
        if has_avx512() {
            return unsafe { avx512(f) };
        }
        if has_avx2_fma() {
            return unsafe { avx2(f) };
        }
    }
    f()
}

/// Defines a public multiversioned loop `$name` from a body, with an AVX2+FMA copy on x86-64.
macro_rules! multiversion {
    ($(#[$doc:meta])* fn $name:ident<$($g:ident),*>($($arg:ident : $ty:ty),*) where $($bounds:tt)*) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// Every pointer must be valid for `n` elements; the output may alias an input exactly.
        #[inline]
        pub unsafe fn $name<$($g),*>($($arg: $ty),*) where $($bounds)* {
            #[inline(always)]
            unsafe fn body<$($g),*>($($arg: $ty),*) where $($bounds)* {
                multiversion!(@body $name $($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2<$($g),*>($($arg: $ty),*) where $($bounds)* {
                body($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            if has_avx2_fma() {
                return avx2($($arg),*);
            }
            body($($arg),*)
        }
    };
    // When the output is exactly an input (a donated buffer), read through a pointer derived from
    // the output itself: the compiler then knows the accesses coincide and vectorises without the
    // runtime overlap check that would otherwise send it to the scalar loop.
    (@body map1 $x:ident, $o:ident, $n:ident, $f:ident) => {
        if $x as usize == $o as usize {
            let x = $o as *const A;
            for i in 0..$n { *$o.add(i) = $f(*x.add(i)); }
        } else {
            for i in 0..$n { *$o.add(i) = $f(*$x.add(i)); }
        }
    };
    (@body map2 $a:ident, $b:ident, $o:ident, $n:ident, $f:ident) => {
        if $a as usize == $o as usize {
            let a = $o as *const A;
            for i in 0..$n { *$o.add(i) = $f(*a.add(i), *$b.add(i)); }
        } else if $b as usize == $o as usize {
            let b = $o as *const A;
            for i in 0..$n { *$o.add(i) = $f(*$a.add(i), *b.add(i)); }
        } else {
            for i in 0..$n { *$o.add(i) = $f(*$a.add(i), *$b.add(i)); }
        }
    };
    (@body map3 $c:ident, $a:ident, $b:ident, $o:ident, $n:ident, $f:ident) => {
        for i in 0..$n { *$o.add(i) = $f(*$c.add(i), *$a.add(i), *$b.add(i)); }
    };
}

multiversion! {
    /// `o[i] = f(x[i])` for i < n.
    fn map1<A, B, F>(x: *const A, o: *mut B, n: usize, f: F) where A: Copy, F: Fn(A) -> B
}
multiversion! {
    /// `o[i] = f(a[i], b[i])` for i < n.
    fn map2<A, B, F>(a: *const A, b: *const A, o: *mut B, n: usize, f: F) where A: Copy, F: Fn(A, A) -> B
}
multiversion! {
    /// `o[i] = f(c[i], a[i], b[i])` for i < n.
    fn map3<C, A, F>(c: *const C, a: *const A, b: *const A, o: *mut A, n: usize, f: F)
        where C: Copy, A: Copy, F: Fn(C, A, A) -> A
}

/// `o[i] = f(x[i])` for `n` elements of `$t`, where `$f` (baseline loop) and `$fma` (the loop
/// built for AVX2+FMA) are paths to `#[inline(always)]` functions; for float32 they are one
/// function instantiated with [`super::math::Unfused`] and [`super::math::Fused`]. Unlike [`map1`],
/// which takes `f` as a closure, the loop names the function directly, so the body is inlined
/// however large it is: a large closure (erf, tanh) is otherwise left as a call per element, and
/// the loop stays scalar. Expands to a statement; `$x`, `$o` may alias exactly.
macro_rules! map1_inlined {
    ($t:ty, $x:expr, $o:expr, $n:expr, $f:path, $fma:path) => {{
        macro_rules! looped {
            ($name:ident, $g:path) => {
                #[inline(always)]
                unsafe fn $name(x: *const $t, o: *mut $t, n: usize) {
                    if x as usize == o as usize {
                        let x = o as *const $t;
                        for i in 0..n { *o.add(i) = $g(*x.add(i)); }
                    } else {
                        for i in 0..n { *o.add(i) = $g(*x.add(i)); }
                    }
                }
            };
        }
        looped!(baseline, $f);
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(x: *const $t, o: *mut $t, n: usize) {
            looped!(body, $fma);
            body(x, o, n)
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
        unsafe fn avx512(x: *const $t, o: *mut $t, n: usize) {
            looped!(body, $fma);
            body(x, o, n)
        }
        let (x, o, n) = ($x, $o, $n);
        #[cfg(target_arch = "x86_64")]
        if $crate::backend::cpu::simd::has_avx512() {
            avx512(x, o, n)
        } else if $crate::backend::cpu::simd::has_avx2_fma() {
            avx2(x, o, n)
        } else {
            baseline(x, o, n)
        }
        #[cfg(not(target_arch = "x86_64"))]
        baseline(x, o, n)
    }};
}
pub(crate) use map1_inlined;
