//! The workload generator every engine is driven by: keys, values and request distributions
//! (db_bench's, and YCSB's zipfian and latest).

/// A small, fast, seedable generator (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..bound` (bound > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A bijective 64-bit mixer (the splitmix64 finaliser): distinct inputs give distinct outputs.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Key `index` in db_bench's form: 16 decimal digits, so that key order is index order.
pub fn key(index: u64, out: &mut [u8; 16]) {
    let mut value = index;
    for byte in out.iter_mut().rev() {
        *byte = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Key `index` in YCSB's form: the index hashed, so that inserts land all over the key
/// space; 16 hexadecimal digits, distinct for distinct indexes.
pub fn hashed_key(index: u64, out: &mut [u8; 16]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let value = mix(index);
    for (position, byte) in out.iter_mut().enumerate() {
        *byte = HEX[((value >> (60 - 4 * position)) & 0xF) as usize];
    }
}

/// Values of a length uniform in `min..=max`, cut from a buffer of random bytes.
#[derive(Debug)]
pub struct Values {
    rng: Rng,
    min: usize,
    max: usize,
    pool: Vec<u8>,
}

impl Values {
    /// A value source (max >= min).
    pub fn new(seed: u64, min: usize, max: usize) -> Self {
        let mut rng = Rng::new(seed ^ 0x5EED);
        let pool = (0..(1 << 20) + max).map(|_| rng.next_u64() as u8).collect();
        Self { rng, min, max: max.max(min), pool }
    }

    /// The next value.
    pub fn next_value(&mut self) -> &[u8] {
        let len = self.min + self.rng.below((self.max - self.min + 1) as u64) as usize;
        let start = self.rng.below(1 << 20) as usize;
        &self.pool[start..start + len]
    }
}

/// YCSB's zipfian generator over `0..items` (Gray et al., "Quickly generating billion-record
/// synthetic databases", SIGMOD 1994), constant 0.99.
#[derive(Debug, Clone)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    zeta_n: f64,
    alpha: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipfian {
    /// A generator over `items` items (items >= 2).
    pub fn new(items: u64) -> Self {
        let theta = 0.99;
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zeta_n = zeta(items);
        let zeta_2 = zeta(2);
        let eta = (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n);
        Self { items, theta, zeta_n, alpha: 1.0 / (1.0 - theta), eta, half_pow_theta: 0.5f64.powf(theta) }
    }

    /// The next rank: 0 is the most popular.
    pub fn next_rank(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1;
        }
        let rank = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.items - 1)
    }

    /// YCSB's scrambled zipfian: popular items spread over the key space.
    pub fn next_scrambled(&self, rng: &mut Rng) -> u64 {
        mix(self.next_rank(rng) ^ 0xC0FF_EE00) % self.items
    }

    /// The exponent (for reports).
    pub fn theta(&self) -> f64 {
        self.theta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_like_their_indexes() {
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        key(99, &mut a);
        key(100, &mut b);
        assert_eq!(&a, b"0000000000000099");
        assert!(a < b);
    }

    #[test]
    fn hashed_keys_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        let mut out = [0u8; 16];
        for index in 0..10_000 {
            hashed_key(index, &mut out);
            assert!(seen.insert(out), "index {index} collides");
        }
    }

    #[test]
    fn values_stay_in_bounds_and_cover_them() {
        let mut values = Values::new(1, 1, 200);
        let lens: Vec<usize> = (0..20_000).map(|_| values.next_value().len()).collect();
        assert!(lens.iter().all(|&len| (1..=200).contains(&len)));
        assert!(lens.contains(&1) && lens.contains(&200));
        let mean = lens.iter().sum::<usize>() as f64 / lens.len() as f64;
        assert!((mean - 100.5).abs() < 3.0, "mean {mean}");
    }

    #[test]
    fn zipfian_favours_low_ranks() {
        let zipf = Zipfian::new(1000);
        let mut rng = Rng::new(7);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[zipf.next_rank(&mut rng) as usize] += 1;
        }
        // Rank 0 is drawn with probability 1/zeta(1000) ≈ 0.13 for theta 0.99.
        assert!(counts[0] > 10_000 && counts[0] < 16_000, "rank 0 drawn {} times", counts[0]);
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[900]);
    }
}
