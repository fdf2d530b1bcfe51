//! The process-wide registry of exported allocations (weak references: exporting does
//! not leak) and of opened mappings (one mapping per allocation and process).

use super::*;

pub(super) struct ExportEntry {
    pub(super) alloc: Weak<Allocation>,
    /// Device address of the start of the driver allocation the CUDA handle names.
    pub(super) base: CUdeviceptr,
}

#[derive(Default)]
pub(super) struct HandleRegistry {
    /// Allocations this process exported, by `CUipcMemHandle` bytes.
    pub(super) exported: HashMap<[u8; RAW], Vec<ExportEntry>>,
    /// Prune dead export entries when the map reaches this size.
    pub(super) prune_at: usize,
    /// Mappings this process opened, by handle bytes and device UUID (CUDA allows one
    /// mapping of a handle per device and process).
    pub(super) opened: HashMap<([u8; RAW], [u8; 16]), Weak<Allocation>>,
}

pub(super) fn registry() -> MutexGuard<'static, HandleRegistry> {
    static REG: OnceLock<Mutex<HandleRegistry>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HandleRegistry::default()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

pub(super) fn register_export(raw: [u8; RAW], alloc: &Arc<Allocation>, base: CUdeviceptr) {
    let mut reg = registry();
    if reg.exported.len() >= reg.prune_at {
        reg.exported.retain(|_, v| {
            v.retain(|e| e.alloc.strong_count() > 0);
            !v.is_empty()
        });
        reg.prune_at = 2 * reg.exported.len() + 64;
    }
    let entries = reg.exported.entry(raw).or_default();
    entries.retain(|e| e.alloc.strong_count() > 0);
    if !entries
        .iter()
        .any(|e| std::ptr::eq(e.alloc.as_ptr(), Arc::as_ptr(alloc)))
    {
        entries.push(ExportEntry {
            alloc: Arc::downgrade(alloc),
            base,
        });
    }
}

/// The CUDA handle this process already got for `alloc`, if any (so that every export
/// of one allocation carries the same bytes, and consumers map it once).
pub(super) fn exported_raw(alloc: &Arc<Allocation>) -> Option<[u8; RAW]> {
    let reg = registry();
    reg.exported.iter().find_map(|(raw, v)| {
        v.iter()
            .any(|e| {
                std::ptr::eq(e.alloc.as_ptr(), Arc::as_ptr(alloc)) && e.alloc.strong_count() > 0
            })
            .then_some(*raw)
    })
}

/// A live allocation this process exported that covers the handle's range, as a buffer.
pub(super) fn lookup_export(h: &IpcMemHandle, ctx: &Context) -> Option<DeviceBuffer> {
    // Declared before the guard so that upgraded references drop after it is released
    // (an allocation's drop may need the registry).
    let mut upgraded: Vec<Arc<Allocation>> = Vec::new();
    let reg = registry();
    let entries = reg.exported.get(&h.raw)?;
    let mut found = None;
    for e in entries {
        let Some(a) = e.alloc.upgrade() else { continue };
        upgraded.push(a.clone());
        let Some(start) = e.base.checked_add(h.offset) else {
            continue;
        };
        let Some(end) = start.checked_add(h.len) else {
            continue;
        };
        let covers = a.ptr <= start && end <= a.ptr + a.size as u64;
        if covers && a.ctx.properties().uuid == ctx.properties().uuid && found.is_none() {
            found = Some(((start - a.ptr) as usize, a));
        }
    }
    drop(reg);
    found.map(|(offset, a)| DeviceBuffer::from_parts(a, offset, h.len as usize, !h.read_only))
}

/// The owner of a mapping of another process's allocation opened with
/// `cuIpcOpenMemHandle` by [`Context::open_ipc`] (the allocation's `ptr` is the mapping's
/// base): closed with `cuIpcCloseMemHandle` when the last buffer that refers to it drops.
pub(super) struct IpcMapping {
    /// The `CUipcMemHandle` bytes it came from (the key of the open-mappings registry).
    pub(super) raw: [u8; RAW],
}

impl DeviceOwner for IpcMapping {
    fn release(&self, ctx: &Context, ptr: CUdeviceptr, _: usize) {
        close_mapping(ctx, ptr, &self.raw);
    }
    fn is_owned(&self) -> bool {
        false
    }
    fn ipc_export(&self) -> IpcExport {
        IpcExport::Handle(self.raw)
    }
}

/// Closes a mapping opened by [`Context::open_ipc`] (from [`IpcMapping`]'s release).
fn close_mapping(ctx: &Context, ptr: CUdeviceptr, raw: &[u8; RAW]) {
    let mut reg = registry();
    if ctx.bind().is_ok() {
        // Safety: `ptr` is the base address cuIpcOpenMemHandle returned for this
        // mapping, and this is the drop of its last owner.
        let _ = unsafe { dipc::ipc_close_mem_handle(ptr) };
    }
    let key = (*raw, ctx.properties().uuid);
    if reg.opened.get(&key).is_some_and(|w| w.strong_count() == 0) {
        reg.opened.remove(&key);
    }
}
