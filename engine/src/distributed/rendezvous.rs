//! The rendezvous of a torchrun-style launch: rank 0 listens on MASTER_ADDR, port MASTER_PORT + 1
//! (torchrun's own store already holds MASTER_PORT), and hands its NCCL unique identifier to every
//! other rank; nothing else crosses it (the collectives are NCCL's). A rank that cannot reach
//! rank 0 within the timeout fails with the address it tried.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::Launch;

/// Bytes of an NCCL unique identifier.
pub const ID_BYTES: usize = 128;

/// What rank 0 sends first, so that a stray connection or another job's rank fails clearly.
const MAGIC: &[u8; 8] = b"LYRUN01\0";

/// Rank 0: binds, then sends `id` (with the world size) to `world_size - 1` ranks.
/// Other ranks: connect (retrying until `timeout`), check the world size, read the identifier.
pub fn exchange(launch: &Launch, timeout: Duration, mint: impl FnOnce() -> Result<[u8; ID_BYTES], String>) -> Result<[u8; ID_BYTES], String> {
    let port = launch.master_port.checked_add(1).ok_or("MASTER_PORT=65535 leaves no port for the rendezvous (it uses MASTER_PORT + 1)")?;
    let address = format!("{}:{port}", launch.master_addr);
    if launch.rank == 0 {
        let id = mint()?;
        let listener = TcpListener::bind(&address).map_err(|e| format!("rank 0 could not listen on {address} (MASTER_ADDR, MASTER_PORT + 1): {e}"))?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let mut served = 0;
        while served + 1 < launch.world_size {
            match listener.accept() {
                Ok((mut peer, _)) => {
                    peer.set_nonblocking(false).map_err(|e| e.to_string())?;
                    let mut message = MAGIC.to_vec();
                    message.extend_from_slice(&(launch.world_size as u32).to_le_bytes());
                    message.extend_from_slice(&id);
                    peer.write_all(&message).map_err(|e| format!("rank 0 could not send the NCCL identifier: {e}"))?;
                    served += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if started.elapsed() > timeout {
                        return Err(format!(
                            "rank 0 waited {}s on {address} for {} other rank(s) and {served} came; start every rank with the same MASTER_ADDR and MASTER_PORT",
                            timeout.as_secs(),
                            launch.world_size - 1
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(format!("rank 0 could not accept a connection on {address}: {e}")),
            }
        }
        return Ok(id);
    }
    let started = Instant::now();
    let mut stream = loop {
        let attempt = address
            .to_socket_addrs()
            .map_err(|e| format!("MASTER_ADDR {address} is not an address: {e}"))?
            .next()
            .ok_or_else(|| format!("MASTER_ADDR {address} resolves to nothing"))
            .and_then(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).map_err(|e| e.to_string()));
        match attempt {
            Ok(stream) => break stream,
            Err(e) if started.elapsed() > timeout => {
                return Err(format!("rank {} could not reach rank 0 at {address} within {}s: {e}", launch.rank, timeout.as_secs()));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    let mut message = [0u8; 8 + 4 + ID_BYTES];
    stream.read_exact(&mut message).map_err(|e| format!("rank {} got no NCCL identifier from rank 0 at {address}: {e}", launch.rank))?;
    if &message[..8] != MAGIC {
        return Err(format!("rank {}: {address} is not a libreyolo-run rank 0", launch.rank));
    }
    let world = u32::from_le_bytes(message[8..12].try_into().expect("4 bytes")) as usize;
    if world != launch.world_size {
        return Err(format!("rank {} has WORLD_SIZE={} but rank 0 has WORLD_SIZE={world}", launch.rank, launch.world_size));
    }
    Ok(message[12..].try_into().expect("128 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(rank: usize, world_size: usize, port: u16) -> Launch {
        Launch { rank, local_rank: rank, world_size, master_addr: "127.0.0.1".into(), master_port: port }
    }

    /// A MASTER_PORT whose rendezvous port (MASTER_PORT + 1) was free a moment ago.
    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port() - 1
    }

    #[test]
    fn every_rank_gets_rank_zeros_identifier() {
        let port = free_port();
        let id: [u8; ID_BYTES] = std::array::from_fn(|i| (i * 7) as u8);
        let ids: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3).map(|rank| s.spawn(move || exchange(&launch(rank, 3, port), Duration::from_secs(20), || Ok(id)))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for got in ids {
            assert_eq!(got.unwrap(), id);
        }
    }

    #[test]
    fn a_world_size_mismatch_is_named() {
        let port = free_port();
        let id = [1u8; ID_BYTES];
        let (zero, one) = std::thread::scope(|s| {
            let zero = s.spawn(move || exchange(&launch(0, 2, port), Duration::from_secs(20), || Ok(id)));
            let one = s.spawn(move || exchange(&launch(1, 3, port), Duration::from_secs(20), || Ok(id)));
            (zero.join().unwrap(), one.join().unwrap())
        });
        assert!(zero.is_ok());
        assert_eq!(one.unwrap_err(), "rank 1 has WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2");
    }

    #[test]
    fn an_absent_rank_zero_times_out_with_the_address() {
        let port = free_port();
        let err = exchange(&launch(1, 2, port), Duration::from_millis(300), || unreachable!()).unwrap_err();
        assert!(err.starts_with(&format!("rank 1 could not reach rank 0 at 127.0.0.1:{} within 0s", port + 1)), "{err}");
    }
}
