//! nvmlReturn_t codes and their strings.

pub const SUCCESS: u32 = 0;
pub const UNINITIALIZED: u32 = 1;
pub const INVALID_ARGUMENT: u32 = 2;
pub const NOT_SUPPORTED: u32 = 3;
pub const NOT_FOUND: u32 = 6;
pub const INSUFFICIENT_SIZE: u32 = 7;
pub const TIMEOUT: u32 = 10;
pub const ARGUMENT_VERSION_MISMATCH: u32 = 25;
pub const UNKNOWN: u32 = 999;

/// NUL-terminated strings, as NVML's nvmlErrorString answers.
pub fn error_string(code: u32) -> &'static [u8] {
    match code {
        0 => b"Success\0",
        1 => b"Uninitialized\0",
        2 => b"Invalid Argument\0",
        3 => b"Not Supported\0",
        4 => b"Insufficient Permissions\0",
        5 => b"Already Initialized\0",
        6 => b"Not Found\0",
        7 => b"Insufficient Size\0",
        8 => b"Insufficient External Power\0",
        9 => b"Driver Not Loaded\0",
        10 => b"Timeout\0",
        11 => b"Interrupt request issue\0",
        12 => b"NVML Shared Library Not Found\0",
        13 => b"Function Not Found\0",
        14 => b"Corrupted infoROM\0",
        15 => b"GPU is lost\0",
        16 => b"GPU requires restart\0",
        17 => b"The operating system has blocked the request.\0",
        18 => b"RM has detected an NVML/RM version mismatch.\0",
        19 => b"In use by another client\0",
        20 => b"Insufficient Memory\0",
        21 => b"No data\0",
        22 => b"The requested vgpu operation is not available on target device, because ECC is enabled\0",
        23 => b"Insufficient resources\0",
        24 => b"Frequency not supported\0",
        25 => b"Argument version mismatch\0",
        26 => b"Deprecated\0",
        27 => b"Not ready\0",
        28 => b"GPU not found\0",
        29 => b"Invalid state\0",
        999 => b"Unknown Error\0",
        _ => b"Unknown Error\0",
    }
}
