"""Customer-relationship-manager tools (WorkBench's ``customer_relationship_manager`` toolkit)."""

from __future__ import annotations

import sqlite3

from pydantic import Field

from environments.workplace_assistant.seed import CUSTOMER_FIELDS, load_fixture
from environments.workplace_assistant.toolkit import (
    ToolArgs, check_choice, check_datetime, check_known_email, next_id, page_clause, require_row, row_dicts,
    workplace_tool,
)
from servers.environment import ToolError

_UPDATABLE = tuple(f for f in CUSTOMER_FIELDS if f != "customer_id")
_DATES = ("last_contact_date", "follow_up_by")


def _check_value(db: sqlite3.Connection, field: str, value: str) -> str:
    fixture = load_fixture()
    if field == "status":
        return check_choice(value, tuple(fixture["statuses"]), "status")
    if field == "product_interest":
        return check_choice(value, tuple(fixture["products"]), "product_interest")
    if field in _DATES:
        return check_datetime(value, "%Y-%m-%d", field)
    if field == "assigned_to_email":
        return check_known_email(db, value, "assigned_to_email")
    if field == "customer_name" and not value.strip():
        raise ToolError("customer_name must not be empty")
    return value


class SearchCustomersArgs(ToolArgs):
    customer_name: str | None = Field(None, description="Name of the customer")
    customer_email: str | None = Field(None, description="Email address of the customer")
    product_interest: str | None = Field(None, description="Product interest of the customer")
    status: str | None = Field(None, description="Current status of the customer")
    assigned_to_email: str | None = Field(None, description="Email address of the person assigned to the customer")
    last_contact_date_min: str | None = Field(None, description="Minimum last contact date. Format: YYYY-MM-DD")
    last_contact_date_max: str | None = Field(None, description="Maximum last contact date. Format: YYYY-MM-DD")
    follow_up_by_min: str | None = Field(None, description="Minimum follow up date. Format: YYYY-MM-DD")
    follow_up_by_max: str | None = Field(None, description="Maximum follow up date. Format: YYYY-MM-DD")
    page: int = Field(1, description="Page number of results to return")
    page_size: int = Field(5, description="Number of customers per page")


@workplace_tool("customer_relationship_manager_search_customers",
                "Searches for customers based on the given parameters with pagination support.", SearchCustomersArgs)
def search_customers(db: sqlite3.Connection, args: SearchCustomersArgs) -> list[dict[str, str]]:
    sql, params = "SELECT * FROM customers WHERE 1=1", []
    for field in ("customer_name", "customer_email"):
        if getattr(args, field):
            sql += f" AND instr(lower({field}), lower(?)) > 0"
            params.append(getattr(args, field))
    for field in ("product_interest", "status", "assigned_to_email"):
        if getattr(args, field):
            sql += f" AND lower({field}) = lower(?)"
            params.append(getattr(args, field))
    for field in _DATES:
        for suffix, op in (("_min", ">="), ("_max", "<=")):
            value = getattr(args, field + suffix)
            if value:
                sql += f" AND {field} {op} ?"
                params.append(check_datetime(value, "%Y-%m-%d", field + suffix))
    limit, limit_params = page_clause(args.page, args.page_size)
    return row_dicts(db.execute(sql + " ORDER BY customer_id" + limit, [*params, *limit_params]))


class UpdateCustomerArgs(ToolArgs):
    customer_id: str = Field(description="ID of the customer")
    field: str = Field(description="Field to update. Available fields are: 'customer_name', 'assigned_to_email', "
                                   "'customer_email', 'customer_phone', 'last_contact_date', 'product_interest', "
                                   "'status', 'notes', 'follow_up_by'")
    new_value: str = Field(description="New value for the field")


@workplace_tool("customer_relationship_manager_update_customer", "Updates a customer record by ID.",
                UpdateCustomerArgs, writes="customers")
def update_customer(db: sqlite3.Connection, args: UpdateCustomerArgs) -> str:
    if args.field not in _UPDATABLE:
        raise ToolError(f"field {args.field!r} cannot be updated; available: {', '.join(_UPDATABLE)}")
    require_row(db, "customers", "customer_id", args.customer_id, "customer ID")
    value = _check_value(db, args.field, args.new_value)
    db.execute(f"UPDATE customers SET {args.field} = ? WHERE customer_id = ?", (value, args.customer_id))
    return "Customer updated successfully."


class AddCustomerArgs(ToolArgs):
    customer_name: str = Field(description="Name of the customer")
    assigned_to_email: str = Field(description="Email address of the person assigned to the customer")
    status: str = Field(description="Current status of the customer. One of: 'Qualified', 'Won', 'Lost', 'Lead', "
                                    "'Proposal'")
    customer_email: str | None = Field(None, description="Email address of the customer")
    customer_phone: str | None = Field(None, description="Phone number of the customer")
    last_contact_date: str | None = Field(None, description="The last date the customer was contacted. "
                                                            "Format: YYYY-MM-DD")
    product_interest: str | None = Field(None, description="Product interest of the customer. One of: 'Software', "
                                                           "'Hardware', 'Services', 'Consulting', 'Training'")
    notes: str | None = Field(None, description="Notes about the customer")
    follow_up_by: str | None = Field(None, description="Date for the next follow up. Format: YYYY-MM-DD")


@workplace_tool("customer_relationship_manager_add_customer", "Adds a new customer record.", AddCustomerArgs,
                writes="customers")
def add_customer(db: sqlite3.Connection, args: AddCustomerArgs) -> str:
    values = {f: (_check_value(db, f, v) if v is not None else None) for f, v in args.model_dump().items()}
    customer_id = next_id(db, "customers")
    db.execute(f"INSERT INTO customers ({', '.join(CUSTOMER_FIELDS)}) VALUES ({', '.join('?' * len(CUSTOMER_FIELDS))})",
               (customer_id, *(values.get(f) for f in CUSTOMER_FIELDS[1:])))
    return customer_id


class CustomerIdArgs(ToolArgs):
    customer_id: str = Field(description="ID of the customer")


@workplace_tool("customer_relationship_manager_delete_customer", "Deletes a customer record by ID.", CustomerIdArgs,
                writes="customers")
def delete_customer(db: sqlite3.Connection, args: CustomerIdArgs) -> str:
    require_row(db, "customers", "customer_id", args.customer_id, "customer ID")
    db.execute("DELETE FROM customers WHERE customer_id = ?", (args.customer_id,))
    return "Customer deleted successfully."
