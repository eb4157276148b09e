//! The network namespace: a fresh one has only a loopback interface, down. Bringing it up is
//! all the network a sandbox gets.

use crate::error::JailError;

/// Brings `lo` up in the current network namespace.
pub fn loopback_up() -> Result<(), JailError> {
    // SAFETY: creating a socket has no memory effects; the fd is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(JailError::Sys {
            step: "socket for loopback",
            source: nix::Error::last(),
        });
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq for SIOCGIFFLAGS/SIOCSIFFLAGS and lives across the calls.
    let result = unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) != 0 {
            Err("SIOCGIFFLAGS lo")
        } else {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) != 0 {
                Err("SIOCSIFFLAGS lo")
            } else {
                Ok(())
            }
        }
    };
    let errno = nix::Error::last();
    // SAFETY: fd is ours and open.
    unsafe { libc::close(fd) };
    result.map_err(|step| JailError::Sys {
        step,
        source: errno,
    })
}
