//! vmcache's TPC-C (`tpcc/TPCCWorkload.hpp`, viktorleis/vmcache, MIT),
//! ported to the trees of `pagecache-btree`: the same nine relations and
//! secondary indexes, the same load, the same five transactions in the
//! same mix (payment 43%, order status 4%, delivery 4%, stock level 4%,
//! new order 45%), with the same non-uniform keys, remote warehouses and
//! the same guards against the anomalies of running without transactions
//! (`manually_handle_isolation_anomalies`). Each lookup of a record the
//! schema guarantees (a warehouse, district, customer, item, stock row, an
//! order its index names) is checked: a missing one is an error, not a
//! skipped step.

use super::schema::{self as s, Fields, FieldsMut};
use pagecache_btree::BTree;
use std::io;

/// TPC-C's items (and stock rows per warehouse).
pub const ITEMS: i32 = 100_000;
/// TPC-C's customers (and initial orders) per district.
pub const CUSTOMERS: i32 = 3000;
const OL_I_ID_C: i32 = 7911;
const C_ID_C: i32 = 259;
const C_LAST_LOAD_C: i32 = 157;
const C_LAST_RUN_C: i32 = 223;

/// The relations, one tree each.
#[derive(Debug)]
pub struct Db {
    pub warehouse: BTree,
    pub district: BTree,
    pub customer: BTree,
    pub customer_wdl: BTree,
    pub history: BTree,
    pub neworder: BTree,
    pub order: BTree,
    pub order_wdc: BTree,
    pub orderline: BTree,
    pub item: BTree,
    pub stock: BTree,
    pub warehouses: i32,
    /// [`ITEMS`], or fewer for the test suite's tiny runs.
    pub items: i32,
    /// [`CUSTOMERS`], or fewer (tiny runs).
    pub customers: i32,
}

impl Db {
    /// Optimistic descents restarted so far, over every relation.
    pub fn restarts(&self) -> u64 {
        [
            &self.warehouse,
            &self.district,
            &self.customer,
            &self.customer_wdl,
            &self.history,
            &self.neworder,
            &self.order,
            &self.order_wdc,
            &self.orderline,
            &self.item,
            &self.stock,
        ]
        .iter()
        .map(|t| t.restarts())
        .sum()
    }
}

/// The relations' names, in [`Db`]'s order (their files).
pub const TABLES: [&str; 11] = [
    "warehouse",
    "district",
    "customer",
    "customer_wdl",
    "history",
    "neworder",
    "order",
    "order_wdc",
    "orderline",
    "item",
    "stock",
];

/// One worker: its random numbers, its history keys, its buffers.
#[derive(Debug)]
pub struct Worker {
    rng: u64,
    thread: i32,
    history: i32,
    buf: Vec<u8>,
    /// Delivery found no new order in a district (vmcache warns).
    pub skipped: u64,
}

fn missing(what: &str, key: &[i32]) -> io::Error {
    io::Error::other(format!("tpcc: {what} {key:?} not found"))
}

impl Worker {
    pub fn new(thread: usize, seed: u64) -> Worker {
        Worker {
            rng: seed ^ (thread as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            thread: thread as i32,
            history: 0,
            buf: Vec::with_capacity(s::customer::SIZE),
            skipped: 0,
        }
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// `0..n`.
    fn rnd(&mut self, n: i32) -> i32 {
        (self.next() % n.max(1) as u64) as i32
    }
    /// `lo..=hi`.
    pub fn urand(&mut self, lo: i32, hi: i32) -> i32 {
        self.rnd(hi - lo + 1) + lo
    }
    fn urand_except(&mut self, lo: i32, hi: i32, v: i32) -> i32 {
        if hi <= lo {
            return lo;
        }
        let r = self.rnd(hi - lo) + lo;
        if r >= v {
            r + 1
        } else {
            r
        }
    }
    fn nurand(&mut self, a: i32, x: i32, y: i32, c: i32) -> i32 {
        (((self.urand(0, a) | self.urand(x, y)) + c) % (y - x + 1)) + x
    }
    fn numeric(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (self.next() >> 11) as f64 / (1u64 << 53) as f64 * (hi - lo)
    }
    fn item_id(&mut self, db: &Db) -> i32 {
        self.nurand(8191, 1, db.items, OL_I_ID_C)
    }
    fn customer_id(&mut self, db: &Db) -> i32 {
        self.nurand(1023, 1, db.customers, C_ID_C)
    }
    /// Random letters and digits, `lo..=hi` of them.
    fn astring(&mut self, lo: i32, hi: i32) -> Vec<u8> {
        const A: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let n = self.urand(lo, hi);
        (0..n).map(|_| A[self.rnd(62) as usize]).collect()
    }
    fn nstring(&mut self, n: i32) -> Vec<u8> {
        (0..n).map(|_| b'0' + self.rnd(10) as u8).collect()
    }
    fn zip(&mut self) -> Vec<u8> {
        let mut z = self.nstring(4);
        z.extend_from_slice(b"11111");
        z
    }
    /// A data string of 25-50 characters, a tenth with "ORIGINAL" inside.
    fn data(&mut self) -> Vec<u8> {
        let mut d = self.astring(25, 50);
        if self.rnd(10) == 0 {
            let keep = self.rnd(d.len() as i32 - 8) as usize;
            d.truncate(keep);
            d.extend_from_slice(b"ORIGINAL");
        }
        d
    }

    /// `lookup1`: the record of `key` into `self.buf`.
    fn get(&mut self, t: &BTree, what: &str, key: &[i32]) -> io::Result<()> {
        if t.get_into(&s::ints(key), &mut self.buf)? {
            Ok(())
        } else {
            Err(missing(what, key))
        }
    }

    /// `update1`.
    fn update(t: &BTree, what: &str, key: &[i32], f: impl FnOnce(&mut [u8])) -> io::Result<()> {
        if t.update(&s::ints(key), f)? {
            Ok(())
        } else {
            Err(missing(what, key))
        }
    }

    // ----- load ---------------------------------------------------------------------

    pub fn load_items(&mut self, db: &Db) -> io::Result<()> {
        let mut r = [0u8; s::item::SIZE];
        for i in 1..=db.items {
            let im = self.urand(1, 10_000);
            r.set_i32(s::item::IM_ID, im);
            let name = self.astring(14, 24);
            r.set_text(s::item::NAME, 24, &name);
            let price = self.numeric(1.0, 100.0);
            r.set_f64(s::item::PRICE, price);
            let data = self.data();
            r.set_text(s::item::DATA, 50, &data);
            db.item.insert(&s::ints(&[i]), &r)?;
        }
        Ok(())
    }

    pub fn load_warehouses(&mut self, db: &Db) -> io::Result<()> {
        for w in 1..=db.warehouses {
            let mut r = [0u8; s::warehouse::SIZE];
            self.address(&mut r);
            let tax = self.numeric(0.1, 0.2);
            r.set_f64(s::warehouse::TAX, tax);
            r.set_f64(s::warehouse::YTD, 3_000_000.0);
            db.warehouse.insert(&s::ints(&[w]), &r)?;
        }
        Ok(())
    }

    /// Name, streets, city, state and zip (the same offsets in
    /// `warehouse_t` and `district_t`).
    fn address(&mut self, r: &mut [u8]) {
        let name = self.astring(6, 10);
        r.set_text(s::warehouse::NAME, 10, &name);
        for i in 0..3 {
            let v = self.astring(10, 20);
            r.set_text(s::warehouse::STREET_1 + 22 * i, 20, &v);
        }
        let st = self.astring(2, 2);
        r.set_text(s::warehouse::STATE, 2, &st);
        let z = self.zip();
        r.set_text(s::warehouse::ZIP, 9, &z);
    }

    /// Stock, districts, customers and orders of warehouse `w`.
    pub fn load_warehouse(&mut self, db: &Db, w: i32) -> io::Result<()> {
        let mut r = [0u8; s::stock::SIZE];
        for i in 1..=db.items {
            let q = self.numeric(10.0, 100.0);
            r.set_f64(s::stock::QUANTITY, q);
            for d in 0..10 {
                let v = self.astring(24, 24);
                r.set_text(s::stock::DIST + 26 * d, 24, &v);
            }
            let data = self.data();
            r.set_text(s::stock::DATA, 50, &data);
            db.stock.insert(&s::ints(&[w, i]), &r)?;
        }
        for d in 1..=10 {
            let mut r = [0u8; s::district::SIZE];
            self.address(&mut r);
            let tax = self.numeric(0.0, 0.2);
            r.set_f64(s::district::TAX, tax);
            r.set_f64(s::district::YTD, 3_000_000.0);
            r.set_i32(s::district::NEXT_O_ID, db.customers + 1);
            db.district.insert(&s::ints(&[w, d]), &r)?;
        }
        for d in 1..=10 {
            self.load_customers(db, w, d)?;
            self.load_orders(db, w, d)?;
        }
        Ok(())
    }

    fn load_customers(&mut self, db: &Db, w: i32, d: i32) -> io::Result<()> {
        let mut r = vec![0u8; s::customer::SIZE];
        for i in 0..db.customers {
            let last = if i < 1000 {
                name(i)
            } else {
                let n = self.nurand(255, 0, 999, C_LAST_LOAD_C);
                name(n)
            };
            let first = self.astring(8, 16);
            r.fill(0);
            r.set_text(s::customer::FIRST, 16, &first);
            r.set_text(s::customer::MIDDLE, 2, b"OE");
            r.set_text(s::customer::LAST, 16, &last);
            let credit: &[u8] = if self.rnd(10) != 0 { b"GC" } else { b"BC" };
            r.set_text(s::customer::CREDIT, 2, credit);
            r.set_f64(s::customer::CREDIT_LIM, 50_000.0);
            let disc = self.numeric(0.0, 0.5);
            r.set_f64(s::customer::DISCOUNT, disc);
            r.set_f64(s::customer::BALANCE, -10.0);
            r.set_f64(s::customer::YTD_PAYMENT, 1.0);
            let data = self.astring(300, 500);
            r.set_text(s::customer::DATA, 500, &data);
            db.customer.insert(&s::ints(&[w, d, i + 1]), &r)?;
            let mut k = s::ints(&[w, d]);
            s::text(&mut k, &last);
            s::text(&mut k, &first);
            db.customer_wdl.insert(&k, &(i + 1).to_le_bytes())?;
            let mut h = [0u8; s::history::SIZE];
            for (j, v) in [i + 1, d, w, d, w].into_iter().enumerate() {
                h.set_i32(4 * j, v);
            }
            h.set_i64(s::history::DATE, 1);
            h.set_f64(s::history::AMOUNT, 10.0);
            let hd = self.astring(12, 24);
            h.set_text(s::history::DATA, 24, &hd);
            self.history(db, &h)?;
        }
        Ok(())
    }

    fn history(&mut self, db: &Db, h: &[u8]) -> io::Result<()> {
        let k = s::ints(&[self.thread, self.history]);
        self.history += 1;
        db.history.insert(&k, h)?;
        Ok(())
    }

    fn load_orders(&mut self, db: &Db, w: i32, d: i32) -> io::Result<()> {
        let mut c_ids: Vec<i32> = (1..=db.customers).collect();
        for i in (1..=db.customers as usize).rev() {
            let j = self.urand(0, i as i32 - 1) as usize;
            c_ids.swap(j, i - 1);
        }
        // The first 70% delivered (2,100 of 3,000), the rest new orders.
        let delivered = db.customers * 7 / 10;
        for (o, &c) in c_ids.iter().enumerate() {
            let o = o as i32 + 1;
            let carrier = if o <= delivered { self.rnd(10) + 1 } else { 0 };
            let ol_cnt = self.rnd(10) + 5;
            let mut r = [0u8; s::order::SIZE];
            r.set_i32(s::order::C_ID, c);
            r.set_i64(s::order::ENTRY_D, 1);
            r.set_i32(s::order::CARRIER_ID, carrier);
            r.set_f64(s::order::OL_CNT, ol_cnt as f64);
            r.set_f64(s::order::ALL_LOCAL, 1.0);
            db.order.insert(&s::ints(&[w, d, o]), &r)?;
            db.order_wdc
                .insert(&s::ints(&[w, d, c, o]), &[0; s::EMPTY])?;
            for n in 1..=ol_cnt {
                let mut l = [0u8; s::orderline::SIZE];
                let amount = if o <= delivered {
                    0.0
                } else {
                    self.numeric(0.01, 9999.99)
                };
                let i_id = self.rnd(db.items) + 1;
                l.set_i32(s::orderline::I_ID, i_id);
                l.set_i32(s::orderline::SUPPLY_W_ID, w);
                l.set_i64(s::orderline::DELIVERY_D, (o <= delivered) as i64);
                l.set_f64(s::orderline::QUANTITY, 5.0);
                l.set_f64(s::orderline::AMOUNT, amount);
                let dist = self.astring(24, 24);
                l.set_text(s::orderline::DIST_INFO, 24, &dist);
                db.orderline.insert(&s::ints(&[w, d, o, n]), &l)?;
            }
        }
        for o in delivered..=db.customers {
            db.neworder.insert(&s::ints(&[w, d, o]), &[0; s::EMPTY])?;
        }
        Ok(())
    }

    // ----- run ----------------------------------------------------------------------

    /// One transaction of the mix on home warehouse `w`; which one (0
    /// payment, 1 order status, 2 delivery, 3 stock level, 4 new order).
    pub fn tx(&mut self, db: &Db, w: i32) -> io::Result<usize> {
        let mut r = self.rnd(10_000);
        if r < 4300 {
            self.payment_rnd(db, w)?;
            return Ok(0);
        }
        r -= 4300;
        if r < 400 {
            self.order_status_rnd(db, w)?;
            return Ok(1);
        }
        r -= 400;
        if r < 400 {
            let carrier = self.urand(1, 10);
            self.delivery(db, w, carrier)?;
            return Ok(2);
        }
        r -= 400;
        if r < 400 {
            let (d, t) = (self.urand(1, 10), self.urand(10, 20));
            self.stock_level(db, w, d, t)?;
            return Ok(3);
        }
        self.new_order_rnd(db, w)?;
        Ok(4)
    }

    fn new_order_rnd(&mut self, db: &Db, w: i32) -> io::Result<()> {
        let d = self.urand(1, 10);
        let c = self.customer_id(db);
        let n = self.urand(5, 15);
        let mut lines = Vec::with_capacity(15);
        for _ in 0..n {
            let mut sup = w;
            if self.urand(1, 100) == 1 {
                sup = self.urand_except(1, db.warehouses, w);
            }
            let item = self.item_id(db);
            let qty = self.urand(1, 10);
            lines.push((sup, item, qty));
        }
        self.new_order(db, w, d, c, &lines)
    }

    fn new_order(
        &mut self,
        db: &Db,
        w: i32,
        d: i32,
        c: i32,
        lines: &[(i32, i32, i32)],
    ) -> io::Result<()> {
        self.get(&db.warehouse, "warehouse", &[w])?;
        let w_tax = self.buf.f64_at(s::warehouse::TAX);
        self.get(&db.customer, "customer", &[w, d, c])?;
        let c_discount = self.buf.f64_at(s::customer::DISCOUNT);
        let (mut d_tax, mut o_id) = (0.0, 0);
        Self::update(&db.district, "district", &[w, d], |r| {
            d_tax = r.f64_at(s::district::TAX);
            o_id = r.i32_at(s::district::NEXT_O_ID);
            r.set_i32(s::district::NEXT_O_ID, o_id + 1);
        })?;
        let all_local = lines.iter().all(|l| l.0 == w);
        let mut o = [0u8; s::order::SIZE];
        o.set_i32(s::order::C_ID, c);
        o.set_i64(s::order::ENTRY_D, 1);
        o.set_f64(s::order::OL_CNT, lines.len() as f64);
        o.set_f64(s::order::ALL_LOCAL, all_local as i32 as f64);
        db.order.insert(&s::ints(&[w, d, o_id]), &o)?;
        db.order_wdc
            .insert(&s::ints(&[w, d, c, o_id]), &[0; s::EMPTY])?;
        db.neworder
            .insert(&s::ints(&[w, d, o_id]), &[0; s::EMPTY])?;
        for &(sup, item, qty) in lines {
            Self::update(&db.stock, "stock", &[sup, item], |r| {
                let q = r.f64_at(s::stock::QUANTITY);
                let qf = qty as f64;
                r.set_f64(
                    s::stock::QUANTITY,
                    if q >= qf + 10.0 {
                        q - qf
                    } else {
                        q + 91.0 - qf
                    },
                );
                let remote = r.f64_at(s::stock::REMOTE_CNT) + (sup != w) as i32 as f64;
                r.set_f64(s::stock::REMOTE_CNT, remote);
                let cnt = r.f64_at(s::stock::ORDER_CNT) + 1.0;
                r.set_f64(s::stock::ORDER_CNT, cnt);
                let ytd = r.f64_at(s::stock::YTD) + qf;
                r.set_f64(s::stock::YTD, ytd);
            })?;
        }
        for (n, &(sup, item, qty)) in lines.iter().enumerate() {
            self.get(&db.item, "item", &[item])?;
            let price = self.buf.f64_at(s::item::PRICE);
            self.get(&db.stock, "stock", &[w, item])?;
            let off = s::stock::DIST + 26 * (d as usize - 1);
            let mut l = [0u8; s::orderline::SIZE];
            l[s::orderline::DIST_INFO..s::orderline::DIST_INFO + 26]
                .copy_from_slice(&self.buf[off..off + 26]);
            let amount = qty as f64 * price * (1.0 + w_tax + d_tax) * (1.0 - c_discount);
            l.set_i32(s::orderline::I_ID, item);
            l.set_i32(s::orderline::SUPPLY_W_ID, sup);
            l.set_f64(s::orderline::QUANTITY, qty as f64);
            l.set_f64(s::orderline::AMOUNT, amount);
            db.orderline
                .insert(&s::ints(&[w, d, o_id, n as i32 + 1]), &l)?;
        }
        Ok(())
    }

    fn delivery(&mut self, db: &Db, w: i32, carrier: i32) -> io::Result<()> {
        for d in 1..=10 {
            // The oldest new order of the district.
            let mut o_id = None;
            db.neworder.scan(&s::ints(&[w, d, i32::MIN]), |k, _| {
                if s::key_int(k, 0) == w && s::key_int(k, 4) == d {
                    o_id = Some(s::key_int(k, 8));
                }
                false
            })?;
            let Some(o_id) = o_id else {
                self.skipped += 1;
                continue;
            };
            // Another delivery may have taken it meanwhile: whoever removes
            // it delivers it.
            if !db.neworder.remove(&s::ints(&[w, d, o_id]))? {
                continue;
            }
            // The order, checked to be there (vmcache's anomaly guard).
            let okey = s::ints(&[w, d, o_id]);
            let mut found = None;
            db.order.scan(&okey, |k, v| {
                if k == &okey[..] {
                    found = Some((v.f64_at(s::order::OL_CNT) as i32, v.i32_at(s::order::C_ID)));
                }
                false
            })?;
            let Some((ol_cnt, c)) = found else { continue };
            Self::update(&db.order, "order", &[w, d, o_id], |r| {
                r.set_i32(s::order::CARRIER_ID, carrier)
            })?;
            // Every order line inserted (the new order may still be
            // inserting them).
            let lkey = s::ints(&[w, d, o_id, ol_cnt]);
            let mut complete = false;
            db.orderline.scan(&lkey, |k, _| {
                complete = k == &lkey[..];
                false
            })?;
            if !complete {
                continue;
            }
            let mut total = 0.0;
            for n in 1..=ol_cnt {
                Self::update(&db.orderline, "order line", &[w, d, o_id, n], |r| {
                    total += r.f64_at(s::orderline::AMOUNT);
                    r.set_i64(s::orderline::DELIVERY_D, 1);
                })?;
            }
            Self::update(&db.customer, "customer", &[w, d, c], |r| {
                let b = r.f64_at(s::customer::BALANCE) + total;
                r.set_f64(s::customer::BALANCE, b);
                let n = r.f64_at(s::customer::DELIVERY_CNT) + 1.0;
                r.set_f64(s::customer::DELIVERY_CNT, n);
            })?;
        }
        Ok(())
    }

    fn stock_level(&mut self, db: &Db, w: i32, d: i32, threshold: i32) -> io::Result<()> {
        self.get(&db.district, "district", &[w, d])?;
        let o_id = self.buf.i32_at(s::district::NEXT_O_ID);
        let min = o_id - 20;
        let mut items = Vec::with_capacity(300);
        db.orderline
            .scan(&s::ints(&[w, d, min, i32::MIN]), |k, v| {
                let o = s::key_int(k, 8);
                if s::key_int(k, 0) == w && s::key_int(k, 4) == d && o < o_id && o >= min {
                    items.push(v.i32_at(s::orderline::I_ID));
                    true
                } else {
                    false
                }
            })?;
        items.sort_unstable();
        items.dedup();
        let mut low = 0;
        for i in items {
            self.get(&db.stock, "stock", &[w, i])?;
            low += (self.buf.f64_at(s::stock::QUANTITY) < threshold as f64) as u32;
        }
        std::hint::black_box(low);
        Ok(())
    }

    fn order_status_rnd(&mut self, db: &Db, w: i32) -> io::Result<()> {
        let d = self.urand(1, 10);
        let c = if self.urand(1, 100) <= 40 {
            let c = self.customer_id(db);
            self.get(&db.customer, "customer", &[w, d, c])?;
            std::hint::black_box(self.buf.f64_at(s::customer::BALANCE));
            c
        } else {
            let n = self.nurand(255, 0, 999, C_LAST_RUN_C);
            match self.by_name(db, w, d, &name(n))? {
                Some(c) => c,
                None => return Ok(()),
            }
        };
        // The customer's latest order (vmcache: a descending scan of the
        // index from the customer's greatest key; here the customer's
        // entries ascending, the last one kept).
        let prefix = s::ints(&[w, d, c]);
        let mut o_id = None;
        db.order_wdc.scan(&prefix, |k, _| {
            if k.starts_with(&prefix) {
                o_id = Some(s::key_int(k, 12));
                true
            } else {
                false
            }
        })?;
        let Some(o_id) = o_id else { return Ok(()) };
        self.get(&db.order, "order", &[w, d, o_id])?;
        let mut lines = 0;
        db.orderline
            .scan(&s::ints(&[w, d, o_id, i32::MIN]), |k, v| {
                if s::key_int(k, 0) == w && s::key_int(k, 4) == d && s::key_int(k, 8) == o_id {
                    std::hint::black_box(v.f64_at(s::orderline::AMOUNT));
                    lines += 1;
                    true
                } else {
                    false
                }
            })?;
        std::hint::black_box(lines);
        Ok(())
    }

    /// The middle one of the customers of district (w, d) named `last`.
    fn by_name(&mut self, db: &Db, w: i32, d: i32, last: &[u8]) -> io::Result<Option<i32>> {
        let mut prefix = s::ints(&[w, d]);
        s::text(&mut prefix, last);
        let mut from = prefix;
        s::text(&mut from, b"");
        let mut ids = Vec::new();
        db.customer_wdl.scan(&from, |k, v| {
            if k.starts_with(&prefix) {
                ids.push(v.i32_at(0));
                true
            } else {
                false
            }
        })?;
        if ids.is_empty() {
            return Ok(None);
        }
        let mut i = ids.len() / 2;
        if ids.len() % 2 == 0 {
            i -= 1;
        }
        Ok(Some(ids[i]))
    }

    fn payment_rnd(&mut self, db: &Db, w: i32) -> io::Result<()> {
        let d = self.urand(1, 10);
        let (mut cw, mut cd) = (w, d);
        if self.urand(1, 100) > 85 {
            cw = self.urand_except(1, db.warehouses, w);
            cd = self.urand(1, 10);
        }
        let amount = self.numeric(1.0, 5000.0);
        let by_name = self.urand(1, 100) <= 60;
        self.get(&db.warehouse, "warehouse", &[w])?;
        let w_name = self.buf.text_at(s::warehouse::NAME).to_vec();
        Self::update(&db.warehouse, "warehouse", &[w], |r| {
            let y = r.f64_at(s::warehouse::YTD) + amount;
            r.set_f64(s::warehouse::YTD, y);
        })?;
        self.get(&db.district, "district", &[w, d])?;
        let d_name = self.buf.text_at(s::district::NAME).to_vec();
        Self::update(&db.district, "district", &[w, d], |r| {
            let y = r.f64_at(s::district::YTD) + amount;
            r.set_f64(s::district::YTD, y);
        })?;
        let c = if by_name {
            let n = self.nurand(255, 0, 999, C_LAST_RUN_C);
            match self.by_name(db, cw, cd, &name(n))? {
                Some(c) => c,
                None => return Ok(()),
            }
        } else {
            self.customer_id(db)
        };
        self.get(&db.customer, "customer", &[cw, cd, c])?;
        let bad_credit = self.buf.text_at(s::customer::CREDIT) == b"BC";
        let balance = self.buf.f64_at(s::customer::BALANCE) - amount;
        let ytd = self.buf.f64_at(s::customer::YTD_PAYMENT) + amount;
        let cnt = self.buf.f64_at(s::customer::PAYMENT_CNT) + 1.0;
        let data = bad_credit.then(|| {
            let old = String::from_utf8_lossy(self.buf.text_at(s::customer::DATA)).into_owned();
            format!(
                "| {c:4} {cd:2} {cw:4} {d:2} {w:4} ${amount:7.2} 1 {}{} {old}",
                String::from_utf8_lossy(&w_name),
                String::from_utf8_lossy(&d_name)
            )
        });
        Self::update(&db.customer, "customer", &[cw, cd, c], |r| {
            if let Some(data) = &data {
                r.set_text(s::customer::DATA, 500, data.as_bytes());
            }
            r.set_f64(s::customer::BALANCE, balance);
            r.set_f64(s::customer::YTD_PAYMENT, ytd);
            r.set_f64(s::customer::PAYMENT_CNT, cnt);
        })?;
        let mut h = [0u8; s::history::SIZE];
        for (j, v) in [c, cd, cw, d, w].into_iter().enumerate() {
            h.set_i32(4 * j, v);
        }
        h.set_i64(s::history::DATE, 1);
        h.set_f64(s::history::AMOUNT, amount);
        let mut hd = w_name;
        hd.extend_from_slice(b"    ");
        hd.extend_from_slice(&d_name);
        h.set_text(s::history::DATA, 24, &hd);
        self.history(db, &h)
    }
}

/// TPC-C's customer last name of number `n` (0-999): three syllables.
pub fn name(n: i32) -> Vec<u8> {
    const P: [&[u8]; 10] = [
        b"BAR", b"OUGHT", b"ABLE", b"PRI", b"PRES", b"ESE", b"ANTI", b"CALLY", b"ATION", b"EING",
    ];
    let mut v = P[(n / 100 % 10) as usize].to_vec();
    v.extend_from_slice(P[(n / 10 % 10) as usize]);
    v.extend_from_slice(P[(n % 10) as usize]);
    v
}
