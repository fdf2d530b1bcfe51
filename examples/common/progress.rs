//! What the examples show while they work: a progress bar for reads that take longer
//! than a second (indicatif, on stderr; nothing when stderr is not a terminal), and
//! `RUST_LOG`-filtered logging of devbuf's `tracing` spans and events.

/// Logs devbuf's `tracing` spans and events on stderr when `RUST_LOG` is set (e.g.
/// `RUST_LOG=devbuf_zarr=info`, `RUST_LOG=debug` for every chunk file and fetch).
#[allow(dead_code)]
pub fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    if std::env::var_os("RUST_LOG").is_none() {
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// A progress sink that draws a bar of decoded bytes once a read has run for a
/// second (short reads show nothing), and clears it when the read is done. One bar
/// for every read of the array, one read at a time.
#[cfg(feature = "zarr")]
#[allow(dead_code)]
pub fn read_bar() -> devbuf::zarr::ProgressSink {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    let bar = ProgressBar::hidden();
    let style = ProgressStyle::with_template(
        "  reading [{bar:40}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, {eta} left)",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    let shown = AtomicBool::new(false);
    devbuf::zarr::ProgressSink::new(move |p| {
        if p.chunks_done == 0 {
            // A new read: start over, hidden.
            bar.reset();
            bar.set_draw_target(ProgressDrawTarget::hidden());
            shown.store(false, Ordering::Relaxed);
        }
        if p.is_done() {
            if shown.swap(false, Ordering::Relaxed) {
                bar.finish_and_clear();
            }
            return;
        }
        if !shown.load(Ordering::Relaxed) && p.elapsed >= Duration::from_secs(1) {
            bar.set_length(p.bytes_total);
            bar.set_draw_target(ProgressDrawTarget::stderr());
            shown.store(true, Ordering::Relaxed);
        }
        bar.set_position(p.bytes_done);
    })
}

/// `array` with [`read_bar`] as its reads' progress sink (its other read options kept).
#[cfg(feature = "zarr")]
#[allow(dead_code)]
pub fn show_progress(array: &mut devbuf::zarr::ZarrArray) -> devbuf::Result<()> {
    let options = devbuf::zarr::ReadOptions {
        progress: Some(read_bar()),
        ..array.read_options().clone()
    };
    array.set_read_options(options)
}
