//! The handle types have the traits `docs/contract.md` section 4 promises.
use pagecache::{Config, File, PageCache, PageRef};

fn clone_send_sync<T: Clone + Send + Sync>() {}

#[test]
fn handles_are_clone_send_sync() {
    clone_send_sync::<PageCache>();
    clone_send_sync::<File>();
    clone_send_sync::<PageRef<'static>>();
    clone_send_sync::<Config>();
}

#[test]
fn config_is_built_with_struct_update_syntax() {
    let c = Config {
        capacity: 1 << 20,
        ..Config::default()
    };
    assert_eq!(c.page_size, 4096);
    assert_eq!(c.frames().unwrap(), 256);
}
