//! `Pending` as a `Future`: a copy into page-locked memory awaited inside a
//! current-thread tokio runtime while its stream is held by a gate (the first poll is pending, the waiter thread wakes the
//! task once the gate opens), the data checked; several copies awaited together; a
//! poll after completion is an error.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use devbuf::__test::StreamGate;
use devbuf::cuda::{DeviceBuffer, Stream};

use crate::common::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

gpu_test_exclusive! {
    fn a_pending_copy_is_awaited_on_a_current_thread_runtime() {
        let c = ctx();
        let s = Stream::new(&c).unwrap();
        let n = (8 << 20) + 5;
        let data: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
        let dev = DeviceBuffer::from_slice(&c, &data).unwrap();
        let gate = Arc::new(StreamGate::block(&s).unwrap());
        runtime().block_on(async {
            // Page-locked memory: the DMA is queued behind the gate and the call returns
            // at once (into ordinary memory a large copy completes inside the call, which
            // would wait for the gate forever).
            let mut p = dev.copy_to_host_async(0, c.allocate_host(n).unwrap(), &s).unwrap();
            let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut p).poll(cx))).await;
            assert!(first.is_pending(), "the stream is held: the copy cannot have run");
            gate.open();
            let got = (&mut p).await.unwrap();
            assert!(got[..] == data[..], "the awaited copy's bytes");
            let again = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut p).poll(cx))).await;
            assert!(matches!(again, Poll::Ready(Err(_))), "polled after it returned its memory");
        });
    }
}

gpu_test! {
    fn pending_copies_on_several_streams_are_awaited_together() {
        let c = ctx();
        let streams: Vec<Stream> = (0..4).map(|_| Stream::new(&c).unwrap()).collect();
        let n = 1 << 20;
        let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let dev = DeviceBuffer::from_slice(&c, &data).unwrap();
        let got = runtime().block_on(async {
            let copies = streams
                .iter()
                .map(|s| dev.copy_to_host_async(0, vec![0u8; n], s).unwrap());
            futures::future::try_join_all(copies).await.unwrap()
        });
        assert_eq!(got.len(), 4);
        assert!(got.iter().all(|v| *v == data));
    }
}

gpu_test_exclusive! {
    fn a_stream_is_awaited_until_its_queued_work_has_run() {
        let c = ctx();
        let s = Stream::new(&c).unwrap();
        let n = (4 << 20) + 3;
        let data: Vec<u8> = (0..n).map(|i| (i * 13 + 1) as u8).collect();
        let dev = DeviceBuffer::from_slice(&c, &data).unwrap();
        let gate = Arc::new(StreamGate::block(&s).unwrap());
        runtime().block_on(async {
            let host = dev.copy_to_host_async(0, c.allocate_host(n).unwrap(), &s).unwrap();
            let mut done = s.synchronize_async().unwrap();
            let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut done).poll(cx))).await;
            assert!(first.is_pending(), "the stream is held: its work cannot have run");
            gate.open();
            done.await.unwrap();
            // The copy queued before the synchronisation has completed.
            assert!(s.is_complete().unwrap());
            let got = host.wait().unwrap();
            assert!(got[..] == data[..], "the copy's bytes");
        });
    }
}
