//! Fuzzes the capture-file reader: any bytes, read to the end or to the first
//! error, must not panic, hang or allocate more than one record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netvm_io::{CaptureReader, MAX_CAPLEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(reader) = CaptureReader::from_reader(std::io::Cursor::new(data.to_vec()), "fuzz") {
        for item in reader {
            match item {
                Ok(packet) => assert!(packet.data.len() <= MAX_CAPLEN as usize),
                Err(e) => {
                    assert!(e.offset().unwrap_or(0) <= data.len() as u64);
                    let _ = e.to_string();
                }
            }
        }
    }
});
