//! [`IpcEventHandle`]: an event another process's streams can wait on, and the export
//! method on [`Event`].

use super::*;

/// A handle to an interprocess [`Event`]: another process opens it with
/// [`Context::open_ipc_event`] and makes its streams wait, on the device, until the
/// producer's work recorded by the event has finished — no host round-trip.
///
/// Create the event with `EventFlags { interprocess: true, .. }`, export it once,
/// and [`record`](Event::record) it after the work the consumer must wait for (an IPC
/// event may be re-recorded; a consumer's wait refers to the most recent record at the
/// time it waits). Serializes to a fixed, versioned layout (see the [module docs](crate::ipc)).
///
/// ```no_run
/// use devbuf_core::cuda::{Context, Event, EventFlags, Stream};
/// use devbuf_core::ipc::IpcEventHandle;
/// // Producer
/// let ctx = Context::new(0)?;
/// let stream = Stream::new(&ctx)?;
/// let done = Event::new(&ctx, EventFlags { interprocess: true, ..Default::default() })?;
/// let text = done.export_ipc()?.to_string();
/// // ... queue work on `stream`, then:
/// done.record(&stream)?;
///
/// // Consumer (another process)
/// let ctx = Context::new(0)?;
/// let event = ctx.open_ipc_event(&text.parse::<IpcEventHandle>()?)?;
/// let mine = Stream::new(&ctx)?;
/// mine.wait_event(&event)?; // work queued on `mine` from now on runs after the producer's
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IpcEventHandle {
    pub(super) raw: [u8; RAW],
    pub(super) device: Option<DeviceId>,
    pub(super) blocking_sync: bool,
    pub(super) pid: u32,
    pub(super) token: u64,
}

impl IpcEventHandle {
    /// The size of the handle's bytes (`Vec::<u8>::from(&handle)`).
    pub const ENCODED_LEN: usize = EVENT_SIZE;

    /// A handle from a raw 64-byte `CUipcEventHandle` (`cudaIpcEventHandle_t`) from
    /// another CUDA program. The device is unknown (CUDA checks it when opening).
    pub fn from_raw_cuda(raw: &[u8]) -> Result<IpcEventHandle> {
        let raw: [u8; RAW] = raw.try_into().map_err(|_| {
            Error::invalid(format!(
                "a CUipcEventHandle is exactly {RAW} bytes, got {}",
                raw.len()
            ))
        })?;
        Ok(IpcEventHandle {
            raw,
            device: None,
            blocking_sync: false,
            pid: 0,
            token: 0,
        })
    }

    /// Builds a handle from its fields, for tests and tools.
    #[doc(hidden)]
    pub fn from_parts(
        raw: [u8; 64],
        device: Option<([u8; 16], u32)>,
        blocking_sync: bool,
        exporter_pid: u32,
        exporter_token: u64,
    ) -> IpcEventHandle {
        IpcEventHandle {
            raw,
            device: device.map(|(uuid, ordinal)| DeviceId { uuid, ordinal }),
            blocking_sync,
            pid: exporter_pid,
            token: exporter_token,
        }
    }

    /// The raw 64-byte `CUipcEventHandle`.
    pub fn raw_cuda(&self) -> [u8; 64] {
        self.raw
    }

    /// The UUID of the event's device, when known.
    pub fn device_uuid(&self) -> Option<[u8; 16]> {
        self.device.map(|d| d.uuid)
    }

    /// The exporting process's id, when known.
    pub fn exporter_pid(&self) -> Option<u32> {
        (self.pid != 0).then_some(self.pid)
    }

    /// The fixed layout described in the [module docs](crate::ipc).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut flags = device_flag(self.device);
        if self.blocking_sync {
            flags |= FLAG_BLOCKING_SYNC;
        }
        let mut w = handle_layout::Writer::default();
        w.bytes(EVENT_MAGIC)
            .u16(VERSION)
            .u16(EVENT_SIZE as u16)
            .u32(flags)
            .bytes(&self.raw);
        write_origin(&mut w, self.device, self.pid, self.token);
        w.finish_with_checksum()
    }

    /// Parses [`encode`](Self::encode)'s output (see the `TryFrom<&[u8]>` impl).
    pub(crate) fn decode(bytes: &[u8]) -> Result<IpcEventHandle> {
        let (mut r, flags) = handle_layout::open_layout(
            bytes,
            EVENT_WHAT,
            EVENT_MAGIC,
            VERSION,
            EVENT_SIZE,
            &[(MEM_MAGIC, MEM_WHAT), (HOST_MAGIC, HOST_WHAT)],
        )?;
        if flags & !(FLAG_DEVICE_KNOWN | FLAG_BLOCKING_SYNC) != 0 {
            return Err(Error::Malformed(format!(
                "{EVENT_WHAT} has unknown flag bits {flags:#x} (known: 0x3)"
            )));
        }
        let raw = r.array::<RAW>()?;
        let (device, pid, token) = read_origin(&mut r, flags, EVENT_WHAT)?;
        if raw == [0; RAW] {
            return Err(Error::Malformed(format!(
                "{EVENT_WHAT} has an all-zero CUDA handle"
            )));
        }
        Ok(IpcEventHandle {
            raw,
            device,
            blocking_sync: flags & FLAG_BLOCKING_SYNC != 0,
            pid,
            token,
        })
    }

    /// Opens the handle on the device it belongs to (found by UUID; device 0 when
    /// unknown). See [`Context::open_ipc_event`].
    pub fn open(&self) -> Result<Event> {
        Context::new(local_ordinal(self.device)?)?.open_ipc_event(self)
    }
}

/// The handle's bytes: the fixed, versioned layout described in the
/// [module docs](crate::ipc) ([`IpcEventHandle::ENCODED_LEN`] bytes).
///
/// ```
/// use devbuf_core::ipc::IpcEventHandle;
/// let h = IpcEventHandle::from_raw_cuda(&[9u8; 64])?;
/// let bytes = Vec::<u8>::from(&h);
/// assert_eq!(bytes.len(), IpcEventHandle::ENCODED_LEN);
/// assert_eq!(IpcEventHandle::try_from(&bytes[..])?, h);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
impl From<&IpcEventHandle> for Vec<u8> {
    fn from(handle: &IpcEventHandle) -> Vec<u8> {
        handle.encode()
    }
}

/// Parses the handle's bytes (`Vec::<u8>::from(&handle)`); anything else is
/// [`Error::Malformed`] saying what was wrong. Never panics.
impl TryFrom<&[u8]> for IpcEventHandle {
    type Error = Error;

    fn try_from(bytes: &[u8]) -> Result<IpcEventHandle> {
        IpcEventHandle::decode(bytes)
    }
}

/// Lowercase hexadecimal of the handle's bytes (`Vec::<u8>::from(&handle)`): text to
/// hand to another process.
impl fmt::Display for IpcEventHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&handle_layout::hex(&self.encode()))
    }
}

/// Parses the [`Display`](fmt::Display) text (surrounding whitespace ignored):
/// `text.parse::<IpcEventHandle>()`.
impl std::str::FromStr for IpcEventHandle {
    type Err = Error;

    fn from_str(text: &str) -> Result<IpcEventHandle> {
        Self::decode(&handle_layout::from_hex(text, EVENT_WHAT)?)
    }
}

impl fmt::Debug for IpcEventHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("IpcEventHandle");
        debug_device(&mut d, self.device);
        d.field("exporter_pid", &self.pid)
            .field(
                "raw",
                &format_args!("{}", handle_layout::hex(&self.raw[..8])),
            )
            .finish()
    }
}

impl Event {
    /// Exports this event for another process (see [`IpcEventHandle`]). The event must
    /// have been created with `EventFlags { interprocess: true, .. }`.
    pub fn export_ipc(&self) -> Result<IpcEventHandle> {
        if !self.flags().interprocess {
            return Err(Error::invalid(
                "only an event created with EventFlags { interprocess: true, .. } can be exported",
            ));
        }
        self.context().bind()?;
        let raw = dipc::ipc_get_event_handle(self.raw())?;
        Ok(IpcEventHandle {
            raw,
            device: Some(device_id(self.context())),
            blocking_sync: self.flags().blocking_sync,
            pid: std::process::id(),
            token: handle_layout::process_token(),
        })
    }
}
