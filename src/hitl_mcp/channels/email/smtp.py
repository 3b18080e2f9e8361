"""Email: sending through SMTP."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Iterable
from email.message import EmailMessage

import anyio

from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.base import (
    DeliveryError,
)
from hitl_mcp.channels.email.common import _tls_context
from hitl_mcp.channels.email.config import Config, log


class _Smtp(BaseChannel):
    """The email channel's way out: SMTP, with errors that never show a secret."""

    config: Config
    _passwords: list[str]  # set by EmailChannel.__init__

    # --- SMTP --------------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        for secret in self._passwords:
            if len(secret) >= 3:
                text = text.replace(secret, "***")
        return text

    def _smtp_error(self, exc: BaseException) -> DeliveryError:
        import aiosmtplib

        cfg = self.config.smtp
        where = f"SMTP {cfg.host}:{cfg.port_number}"
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, ssl.SSLError):
            cause = cause.__cause__ or cause.__context__
        if isinstance(exc, aiosmtplib.SMTPAuthenticationError):
            msg = (
                f"{where} refused the login for {cfg.username!r} ({exc.code} {exc.message.strip()}): check "
                "smtp.username and smtp.password (Gmail and Fastmail need an app password)"
            )
            permanent = True
            retry = None
        elif isinstance(cause, ssl.SSLError):
            reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or str(cause)
            msg, permanent, retry = f"{where}: TLS failed ({reason})", True, None
        elif isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
            refused = ", ".join(f"{r.recipient} ({r.code} {r.message.strip()})" for r in exc.recipients)
            msg, permanent, retry = f"{where} refused the recipient: {refused}", True, None
        elif isinstance(exc, aiosmtplib.SMTPTimeoutError | TimeoutError):
            msg, permanent, retry = f"{where} did not answer within {cfg.timeout:g} s", False, None
        elif isinstance(exc, aiosmtplib.SMTPNotSupported):
            msg, permanent, retry = f"{where}: {exc}", True, None
        elif isinstance(exc, aiosmtplib.SMTPResponseException):
            permanent = exc.code >= 500
            msg = f"{where} answered {exc.code} {exc.message.strip()}"
            retry = None if permanent else 60.0
        elif isinstance(exc, aiosmtplib.SMTPException | OSError):
            msg, permanent, retry = f"could not reach {where}: {exc}", False, None
        else:
            msg, permanent, retry = f"{where}: {type(exc).__name__}: {exc}", False, None
        return DeliveryError(self._scrub(msg), retry_after=retry, permanent=permanent)

    async def send(
        self,
        messages: Iterable[EmailMessage],
        on_sent: Callable[[EmailMessage], Awaitable[None]] | None = None,
    ) -> None:
        """Send mails in one SMTP session; ``DeliveryError`` (no secret in it) when that fails."""
        import aiosmtplib

        cfg = self.config.smtp
        smtp = aiosmtplib.SMTP(
            hostname=cfg.host,
            port=cfg.port_number,
            use_tls=cfg.security == "tls",
            start_tls=cfg.security == "starttls",
            tls_context=_tls_context(cfg.ca_file) if cfg.security != "plain" else None,
            timeout=cfg.timeout,
        )
        try:
            with anyio.fail_after(cfg.timeout * 3):
                await smtp.connect()
                if cfg.username:
                    password = cfg.password.get_secret_value() if cfg.password else ""
                    await smtp.login(cfg.username, password)
                for msg in messages:
                    await smtp.send_message(msg)
                    if on_sent is not None:
                        await on_sent(msg)
        except DeliveryError:
            raise
        except Exception as exc:
            raise self._smtp_error(exc) from None
        finally:
            if smtp.is_connected:
                try:
                    with anyio.move_on_after(2):
                        await smtp.quit()
                except Exception:
                    smtp.close()

    async def _send_quietly(self, msg: EmailMessage) -> None:
        try:
            await self.send([msg])
        except DeliveryError as exc:
            log.warning("email %s: could not send a notice to %s: %s", self.name, msg["To"], exc)
