//! TPC-C's nine relations as vmcache stores them (`tpcc/Schema.hpp`,
//! viktorleis/vmcache, MIT): each record is the C struct's bytes (the same
//! size and field offsets, so pages hold as many records as vmcache's),
//! each key the fields folded into bytes that sort as the tuple does
//! (`tpcc/Types.hpp`'s `fold`: a signed integer big-endian with its sign
//! bit flipped, a string's bytes and a zero).

/// A folded key, on the stack (vmcache folds into a stack array too): the
/// longest, `customer_wdl`'s, is 42 bytes.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    b: [u8; 48],
    n: usize,
}

impl std::ops::Deref for Key {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.b[..self.n]
    }
}

impl Key {
    fn push(&mut self, s: &[u8]) {
        self.b[self.n..self.n + s.len()].copy_from_slice(s);
        self.n += s.len();
    }
}

/// `Integer` (i32), folded.
pub fn int(k: &mut Key, x: i32) {
    k.push(&((x as u32) ^ 0x8000_0000).to_be_bytes());
}

/// `Varchar`, folded (at most 16 bytes: the schema's longest key text).
pub fn text(k: &mut Key, s: &[u8]) {
    k.push(&s[..s.len().min(16)]);
    k.push(&[0]);
}

/// The `Integer` at `off` of a folded key.
pub fn key_int(k: &[u8], off: usize) -> i32 {
    let b: [u8; 4] = k[off..off + 4].try_into().expect("4 bytes");
    (u32::from_be_bytes(b) ^ 0x8000_0000) as i32
}

/// A key of `Integer` fields (at most 4).
pub fn ints(fields: &[i32]) -> Key {
    let mut k = Key { b: [0; 48], n: 0 };
    for &f in fields {
        int(&mut k, f);
    }
    k
}

/// Field access on a record's bytes (little-endian, as the C structs on
/// x86-64).
pub trait Fields {
    fn i32_at(&self, off: usize) -> i32;
    fn f64_at(&self, off: usize) -> f64;
    /// A `Varchar<N>` at `off`: its bytes (length first, 2 bytes).
    fn text_at(&self, off: usize) -> &[u8];
}

impl Fields for [u8] {
    fn i32_at(&self, off: usize) -> i32 {
        i32::from_le_bytes(self[off..off + 4].try_into().expect("4 bytes"))
    }
    fn f64_at(&self, off: usize) -> f64 {
        f64::from_le_bytes(self[off..off + 8].try_into().expect("8 bytes"))
    }
    fn text_at(&self, off: usize) -> &[u8] {
        let n = i16::from_le_bytes([self[off], self[off + 1]]).max(0) as usize;
        &self[off + 2..off + 2 + n]
    }
}

/// Field stores on a record's bytes.
pub trait FieldsMut {
    fn set_i32(&mut self, off: usize, v: i32);
    fn set_i64(&mut self, off: usize, v: i64);
    fn set_f64(&mut self, off: usize, v: f64);
    /// A `Varchar<max>` at `off` (truncated to `max`).
    fn set_text(&mut self, off: usize, max: usize, s: &[u8]);
}

impl FieldsMut for [u8] {
    fn set_i32(&mut self, off: usize, v: i32) {
        self[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn set_i64(&mut self, off: usize, v: i64) {
        self[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
    fn set_f64(&mut self, off: usize, v: f64) {
        self[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
    fn set_text(&mut self, off: usize, max: usize, s: &[u8]) {
        let n = s.len().min(max);
        self[off..off + 2].copy_from_slice(&(n as i16).to_le_bytes());
        self[off + 2..off + 2 + n].copy_from_slice(&s[..n]);
    }
}

/// `warehouse_t`: key (w_id).
pub mod warehouse {
    pub const SIZE: usize = 112;
    pub const NAME: usize = 0; // Varchar<10>
    pub const STREET_1: usize = 12; // Varchar<20>, street_2 at 34, city at 56
    pub const STATE: usize = 78; // Varchar<2>
    pub const ZIP: usize = 82; // Varchar<9>
    pub const TAX: usize = 96;
    pub const YTD: usize = 104;
}

/// `district_t`: key (w_id, d_id).
pub mod district {
    pub const SIZE: usize = 120;
    pub const NAME: usize = 0; // Varchar<10>, then as warehouse_t
    pub const TAX: usize = 96;
    pub const YTD: usize = 104;
    pub const NEXT_O_ID: usize = 112;
}

/// `customer_t`: key (w_id, d_id, c_id).
pub mod customer {
    pub const SIZE: usize = 712;
    pub const FIRST: usize = 0; // Varchar<16>
    pub const MIDDLE: usize = 18; // Varchar<2>
    pub const LAST: usize = 22; // Varchar<16>
    pub const CREDIT: usize = 152; // Varchar<2>
    pub const CREDIT_LIM: usize = 160;
    pub const DISCOUNT: usize = 168;
    pub const BALANCE: usize = 176;
    pub const YTD_PAYMENT: usize = 184;
    pub const PAYMENT_CNT: usize = 192;
    pub const DELIVERY_CNT: usize = 200;
    pub const DATA: usize = 208; // Varchar<500>
}

/// `customer_wdl_t`: key (w_id, d_id, c_last, c_first), value c_id.
pub mod customer_wdl {
    pub const SIZE: usize = 4;
}

/// `history_t`: key (thread, h_pk).
pub mod history {
    pub const SIZE: usize = 72;
    pub const DATE: usize = 24;
    pub const AMOUNT: usize = 32;
    pub const DATA: usize = 40; // Varchar<24>
}

/// `neworder_t` and `order_wdc_t`: keys only (an empty struct: one byte).
pub const EMPTY: usize = 1;

/// `order_t`: key (w_id, d_id, o_id).
pub mod order {
    pub const SIZE: usize = 40;
    pub const C_ID: usize = 0;
    pub const ENTRY_D: usize = 8;
    pub const CARRIER_ID: usize = 16;
    pub const OL_CNT: usize = 24;
    pub const ALL_LOCAL: usize = 32;
}

/// `orderline_t`: key (w_id, d_id, o_id, number).
pub mod orderline {
    pub const SIZE: usize = 64;
    pub const I_ID: usize = 0;
    pub const SUPPLY_W_ID: usize = 4;
    pub const DELIVERY_D: usize = 8;
    pub const QUANTITY: usize = 16;
    pub const AMOUNT: usize = 24;
    pub const DIST_INFO: usize = 32; // Varchar<24>
}

/// `item_t`: key (i_id).
pub mod item {
    pub const SIZE: usize = 96;
    pub const IM_ID: usize = 0;
    pub const NAME: usize = 4; // Varchar<24>
    pub const PRICE: usize = 32;
    pub const DATA: usize = 40; // Varchar<50>
}

/// `stock_t`: key (w_id, i_id).
pub mod stock {
    pub const SIZE: usize = 352;
    pub const QUANTITY: usize = 0;
    /// `s_dist_01` .. `s_dist_10`, each a `Varchar<24>` (26 bytes).
    pub const DIST: usize = 8;
    pub const YTD: usize = 272;
    pub const ORDER_CNT: usize = 280;
    pub const REMOTE_CNT: usize = 288;
    pub const DATA: usize = 296; // Varchar<50>
}
