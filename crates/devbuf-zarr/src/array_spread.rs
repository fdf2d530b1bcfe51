//! One read spread over several devices ([`Read::spread`](crate::Read::spread)): the selection
//! partitioned along an axis (each device holds and decodes its part), or replicated
//! (each device decodes a slab, and the slabs are copied device to device, so every
//! chunk is read and decoded once however many devices hold the result).

use std::ops::Range;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::ZarrArray;
use super::read::{self, Decoder, ReadBox, ReadOptions, ReadReport};
use devbuf_core::cuda::{Context, DeviceBuffer, Stream};
use devbuf_core::error::{Error, Result};
use devbuf_core::memory::Memory;
use devbuf_core::zarr::NDBuffer;

/// How [`Read::spread`](crate::Read::spread) lays a selection over its devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Spread {
    /// Each device holds one part of the selection: the selection cut along `axis`
    /// into as many consecutive parts as there are devices, at chunk boundaries where
    /// the axis has at least that many chunks (so no chunk is decoded twice), as equal
    /// as whole chunks allow; otherwise at even element counts. Each device decodes
    /// its own part's chunks (with its own nvCOMP where the decoder says so).
    Partition {
        /// The axis the selection is cut along.
        axis: usize,
    },
    /// Every device holds the whole selection. The selection is cut along axis 0 as for
    /// [`Partition`](Self::Partition), each device decodes one part into its copy, and
    /// the parts are then copied device to device (NVLink or PCIe peer copies where the
    /// devices allow it, else staged by the driver) into every other device's copy:
    /// each chunk is fetched and decoded once.
    Replicate,
}

/// One device's share of a [`Read::spread`](crate::Read::spread).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DevicePart {
    /// The device's ordinal.
    pub device: usize,
    /// The box of the array `array` holds (array coordinates, one range per axis).
    pub ranges: Vec<Range<u64>>,
    /// The box this device read and decoded itself: `ranges` for a partitioned read,
    /// its slab of the selection for a replicated one (empty when the selection had
    /// fewer rows than devices).
    pub decoded: Vec<Range<u64>>,
    /// The part on the device: a C-contiguous device array of `ranges`' shape.
    pub array: NDBuffer,
    /// What the device's own read did (chunks, decoders, time).
    pub report: ReadReport,
    /// Replicated reads: bytes this device copied to the other devices.
    pub copied_out_bytes: u64,
    /// Replicated reads: microseconds from the end of this device's read until its
    /// copies to every other device had finished.
    pub copy_us: u64,
}

/// What [`Read::spread`](crate::Read::spread) returns: one part per device, in the order the
/// devices were given, and the read's figures.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SpreadRead {
    /// One part per device, in the order of the `devices` argument.
    pub parts: Vec<DevicePart>,
    /// Microseconds the whole read took (allocation, every device's read, copies).
    pub elapsed_us: u64,
}

impl std::fmt::Display for SpreadRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} devices in {:.1} ms",
            self.parts.len(),
            self.elapsed_us as f64 / 1e3
        )?;
        for p in &self.parts {
            write!(
                f,
                "\n  device {}: {:?} ({} bytes), decoded {:?}: {} chunks on the CPU, {} on the \
                 GPU, read in {:.1} ms",
                p.device,
                p.ranges,
                p.array.nbytes(),
                p.decoded,
                p.report.cpu_chunks,
                p.report.gpu_chunks,
                p.report.elapsed_us as f64 / 1e3
            )?;
            if p.copied_out_bytes > 0 {
                write!(
                    f,
                    ", copied {} bytes to the others in {:.1} ms",
                    p.copied_out_bytes,
                    p.copy_us as f64 / 1e3
                )?;
            }
        }
        Ok(())
    }
}

impl ZarrArray {
    /// Reads the box `ranges` onto `devices` ([`Read::spread`](crate::Read::spread)'s engine).
    pub(crate) fn read_box_spread(
        &self,
        ranges: &[Range<u64>],
        devices: &[Context],
        spread: Spread,
    ) -> Result<SpreadRead> {
        let started = Instant::now();
        let (start, shape) = self.check_ranges(ranges)?;
        let axis = match spread {
            Spread::Partition { axis } => axis,
            Spread::Replicate => 0,
        };
        if shape.is_empty() {
            return Err(Error::invalid(format!(
                "{} has no axes to spread over devices (a zero-dimensional array: read it \
                 onto one device with read(..).to(..))",
                self.location()
            )));
        }
        if axis >= shape.len() {
            return Err(Error::invalid(format!(
                "Spread::Partition axis {axis} is out of range for {} with {} dimension(s) \
                 (valid: 0 to {})",
                self.location(),
                shape.len(),
                shape.len().saturating_sub(1)
            )));
        }
        check_devices(devices)?;
        let cell = self.source()?.cell_shape[axis];
        let cuts = read::cut::cut(start[axis]..start[axis] + shape[axis], cell, devices.len());
        let boxes: Vec<Vec<Range<u64>>> = cuts
            .iter()
            .map(|c| {
                let mut b = ranges.to_vec();
                b[axis] = c.clone();
                b
            })
            .collect();
        let mut options = self.share_threads(devices.len());
        // Auto on a large read: one decoder for every part, measured on the whole.
        let total = read::plan::checked_bytes(&shape, self.elem())?;
        let auto = match options.decoder {
            Decoder::Auto => read::SpreadAuto::choose(
                &self.source()?,
                total,
                devices,
                match spread {
                    Spread::Partition { .. } => "partition",
                    Spread::Replicate => "replicate",
                },
                options.threads.unwrap_or(1),
            ),
            _ => None,
        };
        if let Some(a) = &auto {
            options.decoder = a.decoder;
        }
        // Each device's part reports to a sink of its own, which adds the parts up.
        let options: Vec<ReadOptions> = match &options.progress {
            Some(sink) => read::progress::spread_sinks(sink, devices.len())
                .into_iter()
                .map(|s| ReadOptions {
                    progress: Some(s),
                    ..options.clone()
                })
                .collect(),
            None => vec![options; devices.len()],
        };
        let mut read = match spread {
            Spread::Partition { .. } => self.read_partitioned(&boxes, devices, &options, started),
            Spread::Replicate => {
                self.read_replicated(ranges, &shape, &boxes, devices, &options, started)
            }
        }?;
        if let Some(a) = &auto {
            a.record(devices, total, read.elapsed_us as f64 * 1e-6);
            for p in &mut read.parts {
                p.report.auto = a.why.clone();
            }
        }
        Ok(read)
    }

    /// The read options of one device's share of a spread read.
    fn share_threads(&self, devices: usize) -> ReadOptions {
        let mut o = self.read_options().clone();
        let threads = o
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()));
        o.threads = Some((threads / devices.max(1)).max(1));
        o
    }

    fn read_partitioned(
        &self,
        boxes: &[Vec<Range<u64>>],
        devices: &[Context],
        options: &[ReadOptions],
        started: Instant,
    ) -> Result<SpreadRead> {
        let stop = Arc::new(AtomicBool::new(false));
        let first: Mutex<Option<Error>> = Mutex::new(None);
        let results: Vec<Option<DevicePart>> = std::thread::scope(|s| {
            let handles: Vec<_> = boxes
                .iter()
                .zip(devices)
                .enumerate()
                .map(|(i, (b, ctx))| {
                    let (stop, first, options) = (stop.clone(), &first, &options[i]);
                    std::thread::Builder::new()
                        .name(format!("devbuf-spread-{i}"))
                        .spawn_scoped(s, move || {
                            let r = read::as_spread_part(|| self.read_part(b, ctx, options, &stop));
                            settle(r, &stop, first)
                        })
                })
                .collect();
            join_all(handles, &stop, &first)
        });
        if let Some(e) = first.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        let parts = results
            .into_iter()
            .map(|p| p.ok_or_else(|| Error::invalid("spread read: a device's part is missing")))
            .collect::<Result<Vec<_>>>()?;
        Ok(SpreadRead {
            parts,
            elapsed_us: micros(started),
        })
    }

    /// One device's part of a partitioned read, into new memory of `ctx`.
    fn read_part(
        &self,
        b: &[Range<u64>],
        ctx: &Context,
        options: &ReadOptions,
        stop: &Arc<AtomicBool>,
    ) -> Result<DevicePart> {
        let (start, shape) = self.check_ranges(b)?;
        let total = read::plan::checked_bytes(&shape, self.elem())?;
        let request = ReadBox {
            start,
            shape: shape.clone(),
            offset: 0,
        };
        let (mem, report) = read::read(
            &self.source()?,
            std::slice::from_ref(&request),
            total,
            read::Dest::New(Some(ctx)),
            options,
            Some(stop.clone()),
        )?;
        let mem = mem.ok_or_else(|| Error::invalid("read engine: no result memory"))?;
        Ok(DevicePart {
            device: ctx.ordinal(),
            ranges: b.to_vec(),
            decoded: b.to_vec(),
            array: self.wrap(mem, &shape)?,
            report,
            copied_out_bytes: 0,
            copy_us: 0,
        })
    }

    fn read_replicated(
        &self,
        ranges: &[Range<u64>],
        shape: &[u64],
        slabs: &[Vec<Range<u64>>],
        devices: &[Context],
        options: &[ReadOptions],
        started: Instant,
    ) -> Result<SpreadRead> {
        let total = read::plan::checked_bytes(shape, self.elem())?;
        // Every device's copy first: a device without room fails the read here.
        let outs = devices
            .iter()
            .map(|c| c.allocate(total))
            .collect::<Result<Vec<DeviceBuffer>>>()?;
        // Slab i's bytes: a contiguous run of the C-order result (cut along axis 0).
        let row = read::plan::checked_bytes(&shape[1..], self.elem())?;
        let spans: Vec<(usize, usize)> = slabs
            .iter()
            .map(|b| {
                let at = (b[0].start - ranges[0].start) as usize * row;
                (at, (b[0].end - b[0].start) as usize * row)
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let first: Mutex<Option<Error>> = Mutex::new(None);
        let done: Vec<Option<(ReadReport, u64, u64)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..devices.len())
                .map(|i| {
                    let (stop, first, outs, spans) = (stop.clone(), &first, &outs, &spans);
                    let options = &options[i];
                    let slab = &slabs[i];
                    std::thread::Builder::new()
                        .name(format!("devbuf-spread-{i}"))
                        .spawn_scoped(s, move || {
                            let r = read::as_spread_part(|| {
                                self.read_slab(i, slab, spans, outs, options, &stop)
                            });
                            settle(r, &stop, first)
                        })
                })
                .collect();
            join_all(handles, &stop, &first)
        });
        if let Some(e) = first.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        let mut parts = Vec::with_capacity(devices.len());
        for ((d, out), (slab, ctx)) in done.into_iter().zip(outs).zip(slabs.iter().zip(devices)) {
            let (report, copied_out_bytes, copy_us) =
                d.ok_or_else(|| Error::invalid("spread read: a device's part is missing"))?;
            parts.push(DevicePart {
                device: ctx.ordinal(),
                ranges: ranges.to_vec(),
                decoded: slab.clone(),
                array: self.wrap(Memory::Device(out), shape)?,
                report,
                copied_out_bytes,
                copy_us,
            });
        }
        Ok(SpreadRead {
            parts,
            elapsed_us: micros(started),
        })
    }

    /// Device `i`'s slab of a replicated read: read into its own copy, then copied
    /// into every other device's copy. The report, bytes copied out, copy time.
    fn read_slab(
        &self,
        i: usize,
        slab: &[Range<u64>],
        spans: &[(usize, usize)],
        outs: &[DeviceBuffer],
        options: &ReadOptions,
        stop: &Arc<AtomicBool>,
    ) -> Result<(ReadReport, u64, u64)> {
        let (at, len) = spans[i];
        if len == 0 {
            // Nothing to read: this part's progress is complete (the sum waits for it).
            if let Some(sink) = &options.progress {
                sink.deliver(&read::Progress::default());
            }
            return Ok((ReadReport::default(), 0, 0));
        }
        let (start, shape) = self.check_ranges(slab)?;
        let request = ReadBox {
            start,
            shape,
            offset: 0,
        };
        let own = outs[i].slice(at, len)?;
        let (_, report) = read::read(
            &self.source()?,
            std::slice::from_ref(&request),
            len,
            read::Dest::Device(&own),
            options,
            Some(stop.clone()),
        )?;
        let copying = Instant::now();
        // One stream per destination, on this (the source) device: the copies to
        // different devices run at the same time.
        let ctx = outs[i].context();
        let mut streams = Vec::with_capacity(outs.len());
        let mut queued = Ok(());
        for (j, out) in outs.iter().enumerate() {
            if j == i || stop.load(Ordering::Acquire) {
                continue;
            }
            queued = Stream::new(ctx).and_then(|stream| {
                out.slice(at, len)?.copy_from_device_on(0, &own, &stream)?;
                streams.push(stream);
                Ok(())
            });
            if queued.is_err() {
                break;
            }
        }
        // Every queued copy finishes before the buffers can be freed, whatever failed.
        let mut synced = Ok(());
        for s in &streams {
            if let Err(e) = s.synchronize() {
                synced = synced.and(Err(e));
            }
        }
        queued?;
        synced?;
        if stop.load(Ordering::Acquire) {
            return Err(Error::invalid(
                "the read was stopped before it finished: another part of it failed",
            ));
        }
        Ok((report, (len * streams.len()) as u64, micros(copying)))
    }
}

/// Each device at most once, and at least one.
fn check_devices(devices: &[Context]) -> Result<()> {
    if devices.is_empty() {
        return Err(Error::invalid(
            "a spread read needs at least one device (an empty list was given)",
        ));
    }
    for (i, a) in devices.iter().enumerate() {
        if let Some(b) = devices[..i].iter().find(|b| b.ordinal() == a.ordinal()) {
            return Err(Error::invalid(format!(
                "a spread read: device {} is listed twice (positions {} and {i}); name each \
                 device once",
                a.ordinal(),
                devices.iter().position(|c| c == b).unwrap_or(0)
            )));
        }
    }
    Ok(())
}

/// A device's outcome: its value, or `None` after recording its error (the first
/// failure, which stops the other devices, is the one the caller gets).
fn settle<T>(r: Result<T>, stop: &AtomicBool, first: &Mutex<Option<Error>>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            if !stop.swap(true, Ordering::AcqRel) {
                *first.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
            None
        }
    }
}

/// Joins every device's thread; a thread that could not start or panicked fails the
/// read (and stops the others).
fn join_all<'s, T>(
    handles: Vec<std::io::Result<std::thread::ScopedJoinHandle<'s, Option<T>>>>,
    stop: &AtomicBool,
    first: &Mutex<Option<Error>>,
) -> Vec<Option<T>> {
    let fail = |e: Error| {
        if !stop.swap(true, Ordering::AcqRel) {
            *first.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
        }
    };
    handles
        .into_iter()
        .map(|h| match h {
            Ok(h) => match h.join() {
                Ok(v) => v,
                Err(p) => {
                    fail(Error::invalid(format!(
                        "spread read: a device's thread panicked: {}",
                        devbuf_core::__private::panic_message(p.as_ref())
                    )));
                    None
                }
            },
            Err(e) => {
                fail(Error::invalid(format!(
                    "spread read: could not start a device's thread: {e}"
                )));
                None
            }
        })
        .collect()
}

fn micros(since: Instant) -> u64 {
    since.elapsed().as_micros().min(u64::MAX as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn a_spread_needs_devices_and_a_valid_box() {
        let a = ZarrArray::open(fixtures::path("v3_float64.zarr")).unwrap(); // 10 x 7
        let e = a
            .read([0..10, 0..7])
            .spread(&[], Spread::Replicate)
            .unwrap_err();
        assert!(e.to_string().contains("at least one device"), "{e}");
        let e = a
            .read([0..11, 0..7])
            .spread(&[], Spread::Partition { axis: 0 })
            .unwrap_err();
        assert!(e.to_string().contains("out of bounds for axis 0"), "{e}");
        let e = a
            .read([0..10, 0..7])
            .spread(&[], Spread::Partition { axis: 2 })
            .unwrap_err();
        assert!(e.to_string().contains("valid: 0 to 1"), "{e}");
    }
}
