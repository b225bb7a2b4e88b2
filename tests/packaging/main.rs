//! Packaging checks written in Rust, one test executable: the image's contents run without
//! Docker (`image_rootfs.rs`, ignored in a plain `cargo test`; `scripts/check-image-rootfs.sh`
//! runs them). The rest of this directory is the pytest suite `scripts/check-packaging.sh`
//! runs, and its fixtures.

#[path = "../common/mod.rs"]
mod common;

mod image_rootfs;
