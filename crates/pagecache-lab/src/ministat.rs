//! ministat-style comparison of two sample sets (FreeBSD's `ministat -c 95`,
//! as seed 003 printed it): N, min, max, median, average and standard
//! deviation of each, then the difference of the averages at 95% confidence
//! by Student's t with a pooled standard deviation, or "No difference
//! proven at 95.0% confidence".

use crate::runner::{mean, median, stddev};

/// Student's t quantile `t_{p, df}` (two-sided 95% uses p = 0.975), by
/// bisection on the CDF computed from the regularized incomplete beta
/// function (Numerical Recipes' continued fraction).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 1000.0);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// CDF of Student's t with `df` degrees of freedom at `t >= 0`.
fn t_cdf(t: f64, df: f64) -> f64 {
    let x = df / (df + t * t);
    1.0 - 0.5 * inc_beta(df / 2.0, 0.5, x)
}

fn ln_gamma(x: f64) -> f64 {
    // Lanczos approximation (g = 7, n = 9).
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Regularized incomplete beta I_x(a, b).
fn inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    // Lentz's method; every step updates c and d the same way.
    const TINY: f64 = 1e-300;
    let nz = |v: f64| if v.abs() < TINY { TINY } else { v };
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / nz(1.0 - qab * x / qap);
    let mut h = d;
    let mut step = |aa: f64| {
        d = 1.0 / nz(1.0 + aa * d);
        c = nz(1.0 + aa / c);
        d * c
    };
    for m in 1..300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        h *= step(m * (b - m) * x / ((qam + m2) * (a + m2)));
        let del = step(-(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)));
        h *= del;
        if (del - 1.0).abs() < 3e-16 {
            break;
        }
    }
    h
}

/// Summary of one sample set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Count.
    pub n: usize,
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// Median.
    pub median: f64,
    /// Average.
    pub avg: f64,
    /// Sample standard deviation.
    pub stddev: f64,
}

impl Summary {
    /// Summarises `v`.
    pub fn of(v: &[f64]) -> Summary {
        let mut s = v.to_vec();
        Summary {
            n: v.len(),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            median: median(&mut s),
            avg: mean(v),
            stddev: stddev(v),
        }
    }
}

/// The difference of `b` against `a` at 95% confidence, if proven:
/// `(difference, +/-, percent, percent +/-, pooled s)`.
pub fn difference(a: &Summary, b: &Summary) -> Option<(f64, f64, f64, f64, f64)> {
    let (n1, n2) = (a.n as f64, b.n as f64);
    if a.n < 2 || b.n < 2 {
        return None;
    }
    let df = n1 + n2 - 2.0;
    let s = (((n1 - 1.0) * a.stddev.powi(2) + (n2 - 1.0) * b.stddev.powi(2)) / df).sqrt();
    let half = t_quantile(0.975, df) * s * (1.0 / n1 + 1.0 / n2).sqrt();
    let d = b.avg - a.avg;
    if d.abs() <= half {
        return None;
    }
    Some((d, half, 100.0 * d / a.avg, 100.0 * half / a.avg, s))
}

/// ministat's text: the two summaries (`x` and `+`) and the verdict.
pub fn compare(a_name: &str, a: &[f64], b_name: &str, b: &[f64]) -> String {
    let (sa, sb) = (Summary::of(a), Summary::of(b));
    let mut out = format!("x {a_name}\n+ {b_name}\n");
    out.push_str("    N           Min           Max        Median           Avg        Stddev\n");
    for (tag, s) in [("x", &sa), ("+", &sb)] {
        out.push_str(&format!(
            "{tag} {:>3} {:>13.6} {:>13.6} {:>13.6} {:>13.6} {:>13.6}\n",
            s.n, s.min, s.max, s.median, s.avg, s.stddev
        ));
    }
    out.push_str(&verdict(&sa, &sb));
    out
}

/// The "Difference at 95.0% confidence" block, or "No difference proven".
pub fn verdict(a: &Summary, b: &Summary) -> String {
    match difference(a, b) {
        Some((d, h, p, ph, s)) => format!(
            "Difference at 95.0% confidence\n      {d:.6} +/- {h:.6}\n      {p:.6}% +/- {ph:.6}%\n      (Student's t, pooled s = {s:.6})\n"
        ),
        None => "No difference proven at 95.0% confidence\n".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_the_textbook_table() {
        for (df, t) in [
            (1.0, 12.706205),
            (5.0, 2.570582),
            (10.0, 2.228139),
            (18.0, 2.100922),
            (30.0, 2.042272),
            (100.0, 1.983972),
        ] {
            assert!(
                (t_quantile(0.975, df) - t).abs() < 1e-5,
                "df {df}: {}",
                t_quantile(0.975, df)
            );
        }
    }

    #[test]
    fn reproduces_seed_003s_ministat_numbers() {
        // Kip Macy's buildkernel system times: base vs page_lock, N = 10.
        let base = Summary {
            n: 10,
            min: 47.35,
            max: 49.09,
            median: 48.64,
            avg: 48.417,
            stddev: 0.53416706,
        };
        let lock = Summary {
            n: 10,
            min: 40.04,
            max: 41.52,
            median: 40.98,
            avg: 40.844,
            stddev: 0.41494846,
        };
        let (d, h, p, ph, s) = difference(&base, &lock).unwrap();
        assert!((d - -7.573).abs() < 1e-9);
        assert!((p - -15.6412).abs() < 1e-4, "{p}");
        assert!((s - 0.478287).abs() < 1e-6, "{s}");
        // ministat's t table holds three decimals (2.101 for df = 18); we use
        // the exact quantile 2.100922, so its +/- is ours scaled by
        // 2.101 / t: the seed's 0.449396 and 0.928179%.
        let scale = 2.101 / t_quantile(0.975, 18.0);
        assert!((h * scale - 0.449396).abs() < 1e-6, "{h}");
        assert!((ph * scale - 0.928179).abs() < 1e-5, "{ph}");
        let v = verdict(&base, &lock);
        assert!(v.starts_with("Difference at 95.0% confidence"));
        assert!(v.contains("(Student's t, pooled s = 0.478287)"));
    }

    #[test]
    fn overlapping_samples_prove_no_difference() {
        let a = [10.0, 11.0, 12.0, 10.5, 11.5];
        let b = [10.2, 11.1, 11.9, 10.6, 11.4];
        assert!(compare("a", &a, "b", &b).ends_with("No difference proven at 95.0% confidence\n"));
    }
}
