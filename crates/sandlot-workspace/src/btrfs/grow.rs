//! Growing the image while the host has room (a step at a time, within the maximum and the
//! host's reserve) and shrinking it back when idle.

use super::*;

impl Btrfs {
    /// Grows the image (allocated on the host) when the filesystem's free space is below the
    /// headroom, by one step, within the maximum and the host's reserve. Returns whether it grew.
    pub(crate) fn grow_if_needed(&self) -> Result<bool> {
        if !self.backed {
            return Ok(false);
        }
        let _guard = self.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.try_grow().inspect_err(|e| {
            self.set_grow_problem(Some(format!("growing the workspace image failed: {e}")))
        })
    }

    pub(super) fn set_grow_problem(&self, problem: Option<String>) {
        *self
            .last_grow_problem
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = problem;
    }

    pub(super) fn try_grow(&self) -> Result<bool> {
        let (_, fs_free) = space::statvfs(&self.mnt)?;
        if fs_free >= self.cfg.image.headroom_bytes {
            self.set_grow_problem(None);
            return Ok(false);
        }
        let size = self.image_size()?;
        let host = self.host_space()?;
        let host_room = host.free_bytes.saturating_sub(host.reserve_bytes);
        let step = round_down_mib(
            self.cfg
                .image
                .grow_step_bytes
                .min(self.max_bytes.saturating_sub(size))
                .min(host_room),
        );
        if step < MIN_GROW {
            // At the maximum size is not a problem in itself (health reports a full filesystem);
            // a host too full to back the next step is.
            let why = (size < self.max_bytes).then(|| {
                format!(
                    "the workspace image cannot grow: the host has {} bytes free, reserve {}",
                    host.free_bytes, host.reserve_bytes
                )
            });
            self.set_grow_problem(why);
            return Ok(false);
        }
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&self.image)
            .at("open", &self.image)?;
        nix::fcntl::fallocate(
            file.as_fd(),
            FallocateFlags::empty(),
            size as i64,
            step as i64,
        )
        .sys("fallocate (grow)", &self.image)?;
        loopdev::set_capacity(&self.loop_device)?;
        ioc::resize_max(&self.fs, &self.mnt)?;
        self.set_grow_problem(None);
        tracing::info!(
            image = %self.image.display(),
            from = size,
            to = size + step,
            "workspace image grown"
        );
        Ok(true)
    }

    /// Gives space back to the host: when the filesystem holds so little that the image could
    /// lose a whole grow step and still keep its headroom plus one more step free, Btrfs moves
    /// its chunks below the new end (`BTRFS_IOC_RESIZE`), the image is truncated there (its
    /// blocks beyond return to the host) and the loop device told. The image stays fully
    /// allocated, so a full host disk still cannot reach the workspaces; never below the
    /// initial size. Returns whether it shrank. Sparse images give space back through
    /// `discard=async` instead.
    pub(crate) fn shrink_if_idle(&self) -> Result<bool> {
        if !self.backed {
            return Ok(false);
        }
        let _guard = self.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
        let size = self.image_size()?;
        let (total, free) = space::statvfs(&self.mnt)?;
        let held = total.saturating_sub(free);
        let image = &self.cfg.image;
        let floor = round_down_mib(image.initial_bytes.min(self.max_bytes)).max(MIN_IMAGE);
        let target = round_up_mib(held + image.headroom_bytes + image.grow_step_bytes).max(floor);
        if size < target.saturating_add(image.grow_step_bytes.max(MIN_GROW)) {
            return Ok(false);
        }
        if let Err(e) = ioc::resize_to(&self.fs, &self.mnt, target) {
            // Chunks that do not fit below the new end (ENOSPC), a balance running: next time.
            tracing::debug!(error = %e, "shrinking the workspace image: not now");
            return Ok(false);
        }
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&self.image)
            .at("open", &self.image)?;
        file.set_len(target).at("truncate (shrink)", &self.image)?;
        loopdev::set_capacity(&self.loop_device)?;
        tracing::info!(
            image = %self.image.display(),
            from = size,
            to = target,
            held,
            "workspace image shrunk: space returned to the host"
        );
        Ok(true)
    }
}
