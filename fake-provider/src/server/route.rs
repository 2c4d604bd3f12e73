//! Where a request goes: a call, the models, `/health`, the admin API,
//! or an HTTP error; and the answers that are not calls.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use wire::headers::{ANTHROPIC_VERSION, X_API_KEY};
use wire::{Api, Dialect};

use super::call::{call, simple_error, RouteResult};
use crate::shared::{full, json_response, Body, Shared};

/// Where a request goes, decided on its borrowed path (no copy of it).
pub(super) enum Route {
    Call(Api),
    Azure,
    Models,
    Health,
    Admin,
    MethodNotAllowed,
    NotFound,
}

pub(super) fn route_of(method: &Method, path: &str) -> Route {
    let api = match path {
        "/v1/chat/completions" => Some(Api::Chat),
        "/v1/messages" => Some(Api::Messages),
        "/v1/responses" => Some(Api::Responses),
        "/v1/embeddings" => Some(Api::Embeddings),
        _ => None,
    };
    match (method, api) {
        (&Method::POST, Some(api)) => Route::Call(api),
        (&Method::POST, None) if crate::api::azure_route(path).is_some() => Route::Azure,
        (&Method::GET, None) if path == "/v1/models" => Route::Models,
        (&Method::GET | &Method::HEAD, None) if path == "/health" => Route::Health,
        _ if path.starts_with("/_fake/") || path == "/metrics" => Route::Admin,
        (_, Some(_)) => Route::MethodNotAllowed,
        _ if path == "/v1/models" => Route::MethodNotAllowed,
        _ => Route::NotFound,
    }
}

pub(super) async fn route(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    peer: SocketAddr,
    fd: RawFd,
) -> RouteResult {
    match route_of(req.method(), req.uri().path()) {
        Route::Call(api) => call(shared, req, api, None, fd).await,
        Route::Azure => azure(shared, req, fd).await,
        // A hung worker answers nothing: the hang's end cuts these.
        Route::Models | Route::Health if shared.down.hanging() => Ok(held(&shared).await),
        Route::Models => Ok(models(&shared, req.headers())),
        Route::Health => Ok(health(&shared)),
        Route::Admin => Ok(crate::admin::admin(shared, req, peer).await),
        Route::MethodNotAllowed => Ok(simple_error(
            Dialect::OpenAi,
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed",
        )),
        Route::NotFound => Ok(simple_error(
            dialect_of(req.headers()),
            StatusCode::NOT_FOUND,
            &format!("no route for {}", req.uri().path()),
        )),
    }
}

/// `GET /health` as vLLM answers it (200, empty body) so routers'
/// health checks pass; 503 while a timeline phase says
/// `health = "failing"`. `HEAD` gets the same status.
pub(super) fn health(shared: &Shared) -> Response<Body> {
    let status = if shared.healthy() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    // hyper sends no body for HEAD: one answer serves both methods.
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = status;
    r
}

/// A request held unanswered in a `hang` phase: the phase's end cuts its
/// connection; shutdown answers it 503.
pub(super) async fn held(shared: &Shared) -> Response<Body> {
    shared.shutdown.cancelled().await;
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r
}

/// An Azure OpenAI call: its `api-version` required, its deployment one
/// of the provider's models (else Azure's 404), then a call like any other
/// with the deployment as its model.
pub(super) async fn azure(shared: Arc<Shared>, req: Request<Incoming>, fd: RawFd) -> RouteResult {
    let path = req.uri().path().to_string();
    let Some((deployment, api)) = crate::api::azure_route(&path) else {
        return Ok(simple_error(
            Dialect::OpenAi,
            StatusCode::NOT_FOUND,
            "no route",
        ));
    };
    if crate::api::api_version(req.uri().query()).is_none() {
        let body = crate::api::azure_error(
            "404",
            "Resource not found: the api-version query parameter is required.",
        );
        return Ok(json_response(StatusCode::NOT_FOUND, body));
    }
    if !shared.run().config.models.iter().any(|m| m == deployment) {
        let body = crate::api::azure_error(
            "DeploymentNotFound",
            "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.",
        );
        return Ok(json_response(StatusCode::NOT_FOUND, body));
    }
    let deployment = deployment.to_string();
    call(shared, req, api, Some(deployment), fd).await
}

pub(super) fn dialect_of(headers: &HeaderMap) -> Dialect {
    if headers.contains_key(ANTHROPIC_VERSION) || headers.contains_key(X_API_KEY) {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    }
}

pub(super) fn models(shared: &Shared, headers: &HeaderMap) -> Response<Body> {
    let created = shared.clock.now_us() / 1_000_000;
    let run = shared.run();
    let models = &run.config.models;
    let body = match dialect_of(headers) {
        Dialect::OpenAi => serde_json::json!({
            "object": "list",
            "data": models.iter().map(|m| serde_json::json!({
                "id": m, "object": "model", "created": created, "owned_by": "rehearse",
            })).collect::<Vec<_>>(),
        }),
        Dialect::Anthropic => serde_json::json!({
            "data": models.iter().map(|m| serde_json::json!({
                "type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z",
            })).collect::<Vec<_>>(),
            "has_more": false,
            "first_id": models.first(),
            "last_id": models.last(),
        }),
    };
    json_response(StatusCode::OK, body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_routed_by_method_and_path() {
        let cases = [
            (Method::POST, "/v1/chat/completions", "call chat"),
            (Method::POST, "/v1/messages", "call messages"),
            (Method::POST, "/v1/responses", "call responses"),
            (Method::POST, "/v1/embeddings", "call embeddings"),
            (
                Method::POST,
                "/openai/deployments/d/chat/completions",
                "azure",
            ),
            (Method::GET, "/openai/deployments/d/chat/completions", "404"),
            (Method::GET, "/v1/models", "models"),
            (Method::GET, "/health", "health"),
            (Method::HEAD, "/health", "health"),
            (Method::POST, "/health", "404"),
            (Method::POST, "/v1/models", "405"),
            (Method::GET, "/v1/chat/completions", "405"),
            (Method::DELETE, "/v1/embeddings", "405"),
            (Method::GET, "/_fake/stats", "admin"),
            (Method::POST, "/_fake/reset", "admin"),
            (Method::GET, "/metrics", "admin"),
            (Method::GET, "/metricsx", "404"),
            (Method::POST, "/v1/chat/completions/", "404"),
            (Method::GET, "/", "404"),
        ];
        for (method, path, want) in cases {
            let got = match route_of(&method, path) {
                Route::Call(api) => format!("call {}", api.as_str()),
                Route::Azure => "azure".into(),
                Route::Models => "models".into(),
                Route::Health => "health".into(),
                Route::Admin => "admin".into(),
                Route::MethodNotAllowed => "405".into(),
                Route::NotFound => "404".into(),
            };
            assert_eq!(got, want, "{method} {path}");
        }
    }
}
