//! [`Service`]: devbuf's `FlightService` — every call checks the bearer token first,
//! then parses its request strictly; blocking work (opening arrays, listing the root)
//! runs on tokio's blocking threads, DoGet streams on producer threads of their own.

use std::sync::Arc;
use std::time::Duration;

use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult,
};
use arrow_ipc::writer::IpcWriteOptions;
use arrow_schema::SchemaRef;
use futures::stream::{self, BoxStream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use devbuf_zarr::ReadOptions;

use super::auth::{Auth, check_token};
use super::config::ServerConfig;
use super::decode::{Decoded, IpcStreamDecoder};
use super::encode::{Batch, wire_bytes};
use super::events::{Observer, ServerEvent, ServerStats};
use super::info::{ArraySource, batch_info};
use super::produce;
use super::protocol::REMOVE_ACTION;
use super::registry::{BatchRegistry, Entry, Refused};
use super::root::Root;
use super::status::code_name;
use super::stream::{self as streams, DoGetStream, Stats};
use super::ticket::{MAX_TICKET_BYTES, Part, Query, Target, batch_name, preview};
use devbuf_core::error::{Error, Result};

/// devbuf's Arrow Flight service (what a [`Server`](super::Server) runs), for a tonic
/// server of your own, on your runtime: [`into_server`](Self::into_server) (or
/// `FlightServiceServer::new(Service::new(&config)?)`, without the configured message
/// limits).
#[derive(Clone)]
pub struct Service {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("root", &self.shared.root.as_ref().map(Root::dir))
            .finish()
    }
}

struct Shared {
    root: Option<Root>,
    auth: Auth,
    registry: BatchRegistry,
    stats: Arc<Stats>,
    endpoints: usize,
    locations: Vec<String>,
    batch_bytes: usize,
    queue_depth: usize,
    max_streams: usize,
    max_upload_bytes: u64,
    max_message_bytes: usize,
    read_options: ReadOptions,
    observer: Option<Observer>,
}

impl Service {
    /// The service `config` describes, after checking it (an error names the field
    /// and its valid range, as [`Server::start`](super::Server::start)'s does).
    ///
    /// ```
    /// use devbuf_flight::{ServerConfig, Service};
    /// let mut cfg = ServerConfig::default();
    /// cfg.tokens.push("s3cret".into());
    /// let service = Service::new(&cfg)?;
    /// cfg.endpoints = 0;
    /// let e = Service::new(&cfg).unwrap_err();
    /// assert!(e.to_string().contains("ServerConfig::endpoints is 0, valid: 1 to 1024"));
    /// # let _ = service;
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn new(config: &ServerConfig) -> Result<Service> {
        config.validate()?;
        let mut tokens = Vec::new();
        for t in &config.tokens {
            tokens.push(check_token(t).map_err(|e| e.context("ServerConfig::tokens"))?);
        }
        let auth = Auth::new(tokens, config.basic_auth.clone());
        if !auth.is_configured() {
            return Err(Error::invalid(
                "a Flight server needs a token (ServerConfig::tokens; read_token_file reads one \
                 from a file) or handshake credentials (ServerConfig::basic_auth): without one \
                 it would refuse every call",
            ));
        }
        let root = config.root.as_deref().map(Root::new).transpose()?;
        Ok(Service {
            shared: Arc::new(Shared {
                root,
                auth,
                registry: BatchRegistry::new(config.max_upload_bytes),
                stats: Arc::new(Stats::default()),
                endpoints: config.endpoints,
                locations: config.locations.clone(),
                batch_bytes: config.batch_bytes,
                queue_depth: config.queue_depth,
                max_streams: config.max_streams,
                max_upload_bytes: config.max_upload_bytes,
                max_message_bytes: config.max_message_bytes,
                read_options: config.read_options.clone(),
                observer: config.observer.clone(),
            }),
        })
    }

    /// The service as tonic's `FlightServiceServer`, with the configuration's message
    /// limits ([`ServerConfig::max_message_bytes`] on what it decodes, none on what it
    /// sends): mount it in a tonic server or router of your own, next to your services,
    /// on your runtime. The listener, TLS and HTTP/2 settings are then yours (a
    /// [`Server`](super::Server) uses 16 MiB stream and 64 MiB connection windows and
    /// `TCP_NODELAY`).
    ///
    /// ```no_run
    /// use devbuf_flight::{Service, ServerConfig};
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut cfg = ServerConfig::default();
    /// cfg.root = Some("/data/zarr".into());
    /// cfg.tokens.push("s3cret".into());
    /// let service = Service::new(&cfg)?;
    /// devbuf_flight::tonic::transport::Server::builder()
    ///     .add_service(service.clone().into_server())
    ///     .serve("0.0.0.0:8815".parse()?)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn into_server(self) -> FlightServiceServer<Service> {
        let limit = self.shared.max_message_bytes;
        FlightServiceServer::new(self)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(usize::MAX)
    }

    pub(crate) fn registry(&self) -> &BatchRegistry {
        &self.shared.registry
    }

    /// What the service holds now.
    pub fn stats(&self) -> ServerStats {
        self.shared.stats.snapshot(self.shared.registry.bytes())
    }

    /// Waits until no stream is active and nothing is queued; false after `timeout`.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        self.shared.stats.wait_idle(timeout)
    }

    fn refuse(&self, call: &'static str, s: Status) -> Status {
        tracing::warn!(
            call,
            code = code_name(s.code()),
            message = s.message(),
            "call refused"
        );
        self.shared.event(ServerEvent::Refused {
            call,
            code: code_name(s.code()),
            message: s.message().to_string(),
        });
        s
    }

    fn authorize<T>(&self, call: &'static str, req: &Request<T>) -> Result<(), Status> {
        self.shared
            .auth
            .check(req.metadata())
            .map_err(|s| self.refuse(call, s))
    }

    /// Runs blocking `f` on tokio's blocking threads.
    async fn blocking<T: Send + 'static>(
        &self,
        call: &'static str,
        f: impl FnOnce(&Shared) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        let shared = self.shared.clone();
        match tokio::task::spawn_blocking(move || f(&shared)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(s)) => Err(self.refuse(call, s)),
            Err(e) => Err(self.refuse(call, Status::internal(format!("{call} failed: {e}")))),
        }
    }
}

fn invalid(e: impl Into<Reason>) -> Status {
    Status::invalid_argument(e.into().0)
}

/// The text of an `InvalidArgument` status: a devbuf error's message (without the
/// kind's prefix) or a text.
struct Reason(String);

impl From<Error> for Reason {
    fn from(e: Error) -> Reason {
        Reason(super::status::message(&e))
    }
}

impl From<&str> for Reason {
    fn from(s: &str) -> Reason {
        Reason(s.to_string())
    }
}

impl From<String> for Reason {
    fn from(s: String) -> Reason {
        Reason(s)
    }
}

impl Shared {
    fn event(&self, e: ServerEvent) {
        if let Some(o) = &self.observer {
            o(&e);
        }
    }

    fn root(&self) -> Result<&Root, Status> {
        self.root.as_ref().ok_or_else(|| {
            Status::not_found("this server serves no zarr arrays (it was started without a root)")
        })
    }

    fn open(&self, path: &str) -> Result<ArraySource, Status> {
        ArraySource::open(self.root()?, path, &self.read_options)
    }

    fn entry(&self, name: &str) -> Result<Arc<Entry>, Status> {
        self.registry
            .get(name)
            .ok_or_else(|| Status::not_found(format!("no batch named {name:?} is served")))
    }

    fn info(&self, q: &Query, descriptor: FlightDescriptor) -> Result<FlightInfo, Status> {
        let endpoints = q.endpoints.unwrap_or(self.endpoints);
        match &q.target {
            Target::Array(path) => {
                let src = self.open(path)?;
                let region = src.region(q.selection.as_deref())?;
                src.info(&region, endpoints, &self.locations, descriptor)
            }
            Target::Batch(name) => {
                if q.selection.is_some() {
                    return Err(invalid("a selection applies to arrays, not to batches"));
                }
                batch_info(
                    name,
                    &*self.entry(name)?,
                    endpoints,
                    &self.locations,
                    descriptor,
                )
            }
        }
    }

    fn schema(&self, q: &Query) -> Result<SchemaRef, Status> {
        match &q.target {
            Target::Array(path) => Ok(self.open(path)?.schema),
            Target::Batch(name) => Ok(self.entry(name)?.schema.clone()),
        }
    }

    fn list(&self, prefix: &str) -> Vec<FlightInfo> {
        let mut out = Vec::new();
        if let Some(root) = &self.root {
            for path in root.list(prefix) {
                let q = Query::whole(Target::Array(path));
                if let Ok(info) = self.info(&q, q.descriptor()) {
                    out.push(info);
                }
            }
        }
        for name in self.registry.names() {
            if name.starts_with(prefix) {
                let q = Query::whole(Target::Batch(name));
                if let Ok(info) = self.info(&q, q.descriptor()) {
                    out.push(info);
                }
            }
        }
        out
    }

    fn start_get(&self, part: Part) -> Result<DoGetStream, Status> {
        match part {
            Part::Chunks {
                array,
                region,
                range,
            } => {
                let src = self.open(&array)?;
                src.check_region(&region)?;
                let batch_bytes = self.batch_bytes;
                let root = self.root.as_ref().map(|r| r.dir().to_path_buf());
                streams::spawn(
                    self.stats.clone(),
                    self.observer.clone(),
                    self.queue_depth,
                    self.max_streams,
                    format!("chunks {}..{} of array {array}", range.start, range.end),
                    move |sink| produce::chunks(src, region, range, batch_bytes, root, sink),
                )
            }
            Part::Batches { name, range } => {
                let entry = self.entry(&name)?;
                streams::spawn(
                    self.stats.clone(),
                    self.observer.clone(),
                    self.queue_depth,
                    self.max_streams,
                    format!("batches {}..{} of {name}", range.start, range.end),
                    move |sink| produce::batches(&name, entry, range, sink),
                )
            }
        }
    }
}

fn schema_result(schema: &SchemaRef) -> Result<SchemaResult, Status> {
    SchemaResult::try_from(SchemaAsIpc::new(schema, &IpcWriteOptions::default()))
        .map_err(|e| Status::internal(format!("encoding the schema: {e}")))
}

#[tonic::async_trait]
impl FlightService for Service {
    type HandshakeStream = BoxStream<'static, Result<HandshakeResponse, Status>>;
    type ListFlightsStream = BoxStream<'static, Result<FlightInfo, Status>>;
    type DoGetStream = DoGetStream;
    type DoPutStream = BoxStream<'static, Result<PutResult, Status>>;
    type DoExchangeStream = BoxStream<'static, Result<FlightData, Status>>;
    type DoActionStream = BoxStream<'static, Result<arrow_flight::Result, Status>>;
    type ListActionsStream = BoxStream<'static, Result<ActionType, Status>>;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        let token = self
            .shared
            .auth
            .handshake(request.metadata())
            .map_err(|s| self.refuse("Handshake", s))?;
        let header = format!("Bearer {token}")
            .parse()
            .map_err(|_| Status::internal("the issued token is not a valid header"))?;
        let reply = HandshakeResponse {
            protocol_version: 0,
            payload: token.into_bytes().into(),
        };
        let mut resp = Response::new(stream::once(async { Ok(reply) }).boxed());
        resp.metadata_mut().insert("authorization", header);
        Ok(resp)
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        self.authorize("ListFlights", &request)?;
        let expr = &request.get_ref().expression;
        if expr.len() > MAX_TICKET_BYTES {
            return Err(self.refuse(
                "ListFlights",
                invalid(format!(
                    "a criteria expression of {} bytes (at most {MAX_TICKET_BYTES}: a path prefix)",
                    expr.len()
                )),
            ));
        }
        let prefix = std::str::from_utf8(expr)
            .map_err(|_| {
                self.refuse(
                    "ListFlights",
                    invalid("the criteria expression is a path prefix, and this is not UTF-8"),
                )
            })?
            .to_string();
        let infos = self
            .blocking("ListFlights", move |s| Ok(s.list(&prefix)))
            .await?;
        Ok(Response::new(
            stream::iter(infos.into_iter().map(Ok)).boxed(),
        ))
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.authorize("GetFlightInfo", &request)?;
        let descriptor = request.into_inner();
        let q = Query::from_descriptor(&descriptor)
            .map_err(|e| self.refuse("GetFlightInfo", invalid(e)))?;
        let info = self
            .blocking("GetFlightInfo", move |s| s.info(&q, descriptor))
            .await?;
        Ok(Response::new(info))
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        self.authorize("PollFlightInfo", &request)?;
        let descriptor = request.into_inner();
        let q = Query::from_descriptor(&descriptor)
            .map_err(|e| self.refuse("PollFlightInfo", invalid(e)))?;
        let info = self
            .blocking("PollFlightInfo", move |s| s.info(&q, descriptor))
            .await?;
        // The flight is complete when it is described: nothing runs in the background.
        Ok(Response::new(PollInfo::new().with_info(info)))
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        self.authorize("GetSchema", &request)?;
        let q = Query::from_descriptor(request.get_ref())
            .map_err(|e| self.refuse("GetSchema", invalid(e)))?;
        let schema = self.blocking("GetSchema", move |s| s.schema(&q)).await?;
        Ok(Response::new(schema_result(&schema)?))
    }

    async fn do_get(
        &self,
        request: Request<arrow_flight::Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        self.authorize("DoGet", &request)?;
        let part = Part::decode(&request.get_ref().ticket)
            .map_err(|e| self.refuse("DoGet", invalid(e)))?;
        let stream = self.blocking("DoGet", move |s| s.start_get(part)).await?;
        Ok(Response::new(stream))
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        self.authorize("DoPut", &request)?;
        let put = self.put(request.into_inner()).await;
        let (name, rows, batches, bytes) = put.map_err(|s| self.refuse("DoPut", s))?;
        tracing::info!(name, rows, batches, bytes, "DoPut stored");
        self.shared.event(ServerEvent::Uploaded {
            name: name.clone(),
            rows,
            bytes,
        });
        let meta =
            serde_json::json!({"name": name, "rows": rows, "batches": batches, "bytes": bytes});
        let result = PutResult {
            app_metadata: meta.to_string().into_bytes().into(),
        };
        Ok(Response::new(stream::once(async { Ok(result) }).boxed()))
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        self.authorize("DoExchange", &request)?;
        Err(self.refuse(
            "DoExchange",
            Status::unimplemented(
                "DoExchange is not offered by devbuf's Flight server: use DoGet and DoPut",
            ),
        ))
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        self.authorize("DoAction", &request)?;
        let action = request.into_inner();
        if action.r#type != REMOVE_ACTION {
            return Err(self.refuse(
                "DoAction",
                invalid(format!(
                    "unknown action {} (actions: {REMOVE_ACTION:?}, whose body is a batch name)",
                    preview(&action.r#type)
                )),
            ));
        }
        let name = std::str::from_utf8(&action.body)
            .map_err(|_| invalid("the action body is not UTF-8"))
            .and_then(|n| batch_name(n).map_err(invalid))
            .map_err(|s| self.refuse("DoAction", s))?;
        if !self.shared.registry.remove(&name) {
            return Err(self.refuse(
                "DoAction",
                Status::not_found(format!("no batch named {name:?} is served")),
            ));
        }
        let result = arrow_flight::Result::new(format!("removed {name}"));
        Ok(Response::new(stream::once(async { Ok(result) }).boxed()))
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        self.authorize("ListActions", &request)?;
        let a = ActionType {
            r#type: REMOVE_ACTION.to_string(),
            description: "remove a registered or uploaded batch; body: its name".to_string(),
        };
        Ok(Response::new(stream::once(async { Ok(a) }).boxed()))
    }
}

impl Service {
    /// Receives one DoPut: the descriptor and schema first, then batches, within the
    /// upload bound; stored only when the whole stream arrived.
    async fn put(&self, mut s: Streaming<FlightData>) -> Result<(String, u64, u64, u64), Status> {
        let limit = self.shared.max_upload_bytes;
        let first = s.message().await?.ok_or_else(|| {
            invalid("an empty DoPut: the first message carries the descriptor and the schema")
        })?;
        let descriptor = first.flight_descriptor.clone().ok_or_else(|| {
            invalid("the first DoPut message has no descriptor (name the batch: [\"batch\", name])")
        })?;
        let q = Query::from_descriptor(&descriptor).map_err(invalid)?;
        let Target::Batch(name) = q.target else {
            return Err(invalid(
                "DoPut stores record batches under [\"batch\", name]; zarr arrays are read-only",
            ));
        };
        if q.selection.is_some() {
            return Err(invalid("DoPut takes no selection"));
        }
        if self.shared.registry.get(&name).is_some() {
            return Err(Status::already_exists(format!(
                "a batch named {name:?} is already served (remove it first: action {REMOVE_ACTION:?})"
            )));
        }
        let mut total = wire_bytes(&first);
        let mut dec = IpcStreamDecoder::default();
        let schema = match dec.decode(&first).map_err(invalid)? {
            Decoded::Schema(schema) => schema,
            _ => return Err(invalid("the first DoPut message must be the schema")),
        };
        let mut batches = Vec::new();
        while let Some(m) = s.message().await? {
            total = total.saturating_add(wire_bytes(&m));
            if total > limit {
                return Err(Status::resource_exhausted(format!(
                    "the upload passed {limit} bytes (the server's bound on uploads)"
                )));
            }
            match dec.decode(&m).map_err(invalid)? {
                Decoded::Batch(rb) => batches.push(Batch::Host(rb)),
                Decoded::Dictionary => {}
                Decoded::Schema(_) => return Err(invalid("a second schema message in a DoPut")),
            }
        }
        let entry = Entry::new(schema, batches).map_err(invalid)?;
        let (rows, n, bytes) = (entry.rows, entry.batches.len() as u64, entry.bytes);
        self.shared
            .registry
            .insert(&name, entry, false)
            .map_err(|r| match r {
                Refused::Exists => {
                    Status::already_exists(format!("a batch named {name:?} is already served"))
                }
                Refused::Full(held, asked, limit) => Status::resource_exhausted(format!(
                    "storing {asked} bytes: {held} of the server's {limit} bytes are held"
                )),
            })?;
        Ok((name, rows, n, bytes))
    }
}
