//! `ListContainers` and `ListPodSandbox` served from cached wire encodings.
//!
//! The simulator keeps every container's and sandbox's list entry encoded (refreshed on
//! each state change), so a list answer is a splice of byte strings instead of building
//! and encoding thousands of messages per call. [`FastLists`] routes those two methods
//! to that path and every other call to the generated tonic service. Clients see the
//! same bytes either way: the contract suite runs over this path.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::task::{Context, Poll};

use bytes::BufMut;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::codegen::{BoxFuture, Service, StdError, http};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstDecoder;
use wasmlet_cri::proto::runtime_service_server::RuntimeServiceServer;
use wasmlet_cri::proto::{ListContainersRequest, ListPodSandboxRequest};

use crate::service::SimService;
use crate::sim::EncodedList;
use crate::sim::Simulator;

const LIST_CONTAINERS: &str = "/runtime.v1.RuntimeService/ListContainers";
const LIST_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/ListPodSandbox";

/// The RuntimeService, with the two list methods answered from cached encodings.
#[derive(Debug, Clone)]
pub struct FastLists {
    sim: Simulator,
    inner: RuntimeServiceServer<SimService>,
    max_message: usize,
}

impl FastLists {
    /// Wraps `inner`, which serves everything else.
    pub fn new(
        sim: Simulator,
        inner: RuntimeServiceServer<SimService>,
        max_message: usize,
    ) -> Self {
        Self {
            sim,
            inner,
            max_message,
        }
    }
}

impl NamedService for FastLists {
    const NAME: &'static str = "runtime.v1.RuntimeService";
}

impl<B> Service<http::Request<B>> for FastLists
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let max = self.max_message;
        match req.uri().path() {
            LIST_CONTAINERS => {
                let method = ListContainers(self.sim.clone());
                Box::pin(
                    async move { Ok(grpc::<ListContainersRequest>(max).unary(method, req).await) },
                )
            }
            LIST_POD_SANDBOX => {
                let method = ListPodSandbox(self.sim.clone());
                Box::pin(
                    async move { Ok(grpc::<ListPodSandboxRequest>(max).unary(method, req).await) },
                )
            }
            _ => self.inner.call(req),
        }
    }
}

fn grpc<Req: prost::Message + Default + Send + 'static>(max: usize) -> Grpc<SplicingCodec<Req>> {
    Grpc::new(SplicingCodec(PhantomData)).apply_max_message_size_config(Some(max), Some(max))
}

struct ListContainers(Simulator);

impl UnaryService<ListContainersRequest> for ListContainers {
    type Response = EncodedList;
    type Future = BoxFuture<Response<EncodedList>, Status>;

    fn call(&mut self, request: Request<ListContainersRequest>) -> Self::Future {
        let sim = self.0.clone();
        Box::pin(async move {
            let list = sim
                .list_containers_encoded(request.into_inner().filter)
                .await?;
            Ok(Response::new(list))
        })
    }
}

struct ListPodSandbox(Simulator);

impl UnaryService<ListPodSandboxRequest> for ListPodSandbox {
    type Response = EncodedList;
    type Future = BoxFuture<Response<EncodedList>, Status>;

    fn call(&mut self, request: Request<ListPodSandboxRequest>) -> Self::Future {
        let sim = self.0.clone();
        Box::pin(async move {
            let list = sim
                .list_pod_sandbox_encoded(request.into_inner().filter)
                .await?;
            Ok(Response::new(list))
        })
    }
}

/// Decodes requests with prost; encodes an [`EncodedList`] as a message whose field 1
/// repeats each part — the layout of `ListContainersResponse.containers` and
/// `ListPodSandboxResponse.items`.
struct SplicingCodec<Req>(PhantomData<Req>);

impl<Req: prost::Message + Default + Send + 'static> Codec for SplicingCodec<Req> {
    type Encode = EncodedList;
    type Decode = Req;
    type Encoder = SplicingEncoder;
    type Decoder = ProstDecoder<Req>;

    fn encoder(&mut self) -> Self::Encoder {
        SplicingEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(Default::default())
    }
}

struct SplicingEncoder;

impl Encoder for SplicingEncoder {
    type Item = EncodedList;
    type Error = Status;

    fn encode(&mut self, list: EncodedList, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // Field 1, wire type 2 (length-delimited): tag byte 0x0a, then the length.
        let total: usize = list
            .parts
            .iter()
            .map(|p| 1 + prost::length_delimiter_len(p.len()) + p.len())
            .sum();
        dst.reserve(total);
        for part in &list.parts {
            dst.put_u8(0x0a);
            prost::encode_length_delimiter(part.len(), dst)
                .map_err(|e| Status::internal(format!("encoding a list entry: {e}")))?;
            dst.put_slice(part);
        }
        Ok(())
    }
}
